"""Streams the continuous loop makes when every row starts together (2026-12-02): 256-token requests, 1-12 at once,
whole and streamed, full-size synthetic weights, lab (P=int8 default, P=int4), 2 threads.
Run from the checkout: python scripts/probes/continuous_rows.py  (see 2026-12-02-engine-thread.md)"""
import sys, os, time, threading
sys.path.insert(0, os.getcwd())
from chattts_lab import SynthesisRequest
from chattts_lab.models import LoadConfig, load_model
from chattts_lab.synthesis import warm_up
from chattts_lab.serve.policy import SchedulerPolicy
from chattts_lab.serve.scheduler import ContinuousScheduler
from chattts_lab.serve.batch import Part
N = 256
m = load_model(LoadConfig(model="synthetic", precision=os.environ.get("P", "int8"), engine="lab", threads=2)); warm_up(m)
req = SynthesisRequest.of("A listener who arrives alone and wants to hear it at once.", max_new_token=N, min_new_token=N)
s = ContinuousScheduler(lambda: m, SchedulerPolicy(max_rows=12))
for k in (1, 2, 4, 8, 12):
    for stream in (False, True):
        t = time.perf_counter()
        fs = [s.submit(Part(req, threading.Event(), (lambda c: None) if stream else None)) for _ in range(k)]
        outs = [f.result() for f in fs]
        wall = time.perf_counter() - t
        dec = max(o.measurements.stages.decoder_s for o in outs)
        print(f"rows {k:2d} {'stream' if stream else 'whole '}: wall {wall:5.2f} s, {wall/N*1000:5.1f} ms/step, audio/s {k*5.45/wall:5.2f}, realtime streams if all: {5.45/wall*k:4.1f}")
