"""Stalls of real-time listeners on the continuous loop (2026-12-02): U users (default 2) start 0.7 s apart, each sends
R (default 3) streamed 256-token requests one after another; prints (user, request, first audio s, worst stall s,
total stall s, chunks, first arrivals). Full-size synthetic weights, lab P=int8, 2 threads.
Run from the checkout: U=3 R=2 python scripts/probes/listeners.py  (see 2026-12-02-engine-thread.md)"""
import sys, os, time, threading
sys.path.insert(0, os.getcwd())
from chattts_lab import SynthesisRequest
from chattts_lab.models import LoadConfig, load_model
from chattts_lab.synthesis import warm_up
from chattts_lab.serve.policy import SchedulerPolicy
from chattts_lab.serve.scheduler import ContinuousScheduler
from chattts_lab.serve.batch import Part
from bench.serving.listening import player_stalls
N = 256; USERS = int(os.environ.get("U", 2)); REQS = int(os.environ.get("R", 3))
m = load_model(LoadConfig(model="synthetic", precision=os.environ.get("P", "int8"), engine="lab", threads=2)); warm_up(m)
req = SynthesisRequest.of("A listener who arrives alone and wants to hear it at once.", max_new_token=N, min_new_token=N)
s = ContinuousScheduler(lambda: m, SchedulerPolicy(max_rows=12))
results = []
def user(u):
    time.sleep(u * 0.7)
    for r in range(REQS):
        arr = []; got = [0]; t0 = time.perf_counter()
        def on_chunk(c):
            got[0] += len(c.audio[0]); arr.append((time.perf_counter() - t0, got[0]))
        s.submit(Part(req, threading.Event(), on_chunk)).result()
        st = player_stalls(arr)
        results.append((u, r, round(arr[0][0], 2), round(st.worst_s, 3), round(st.total_s, 3), len(arr), [round(a[0],2) for a in arr[:6]]))
ths = [threading.Thread(target=user, args=(u,)) for u in range(USERS)]
[t.start() for t in ths]; [t.join() for t in ths]
for r in sorted(results): print(r)
