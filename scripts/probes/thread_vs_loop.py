"""A lab int8 256-token synthesis on full-size synthetic weights: on the main thread, on another thread, and through
the continuous loop with 1 and 12 rows (2026-12-02: 5.9, 9.2, 9.6 and 8.5 s, while the app served the same request
in 3.0-3.7 s; the thread gap is explained in docs/measurements/2026-12-02-openmp-pools.md). Run from the checkout: python scripts/probes/thread_vs_loop.py"""
import sys, time, os, threading
sys.path.insert(0, os.getcwd())
import torch
from chattts_lab import SynthesisRequest
from chattts_lab.models import LoadConfig, load_model
from chattts_lab.serve.batch import Part
from chattts_lab.serve.policy import SchedulerPolicy
from chattts_lab.serve.scheduler import ContinuousScheduler
from chattts_lab.synthesis import warm_up, synthesize

model = load_model(LoadConfig(model="synthetic", precision="int8", engine="lab", threads=2))
warm_up(model)
req = SynthesisRequest.of("A listener who arrives alone and wants to hear it at once.", max_new_token=256, min_new_token=256)
t = time.perf_counter(); synthesize(model, req); print(f"synthesize, main thread: {time.perf_counter() - t:.2f} s")
def in_thread():
    t = time.perf_counter(); synthesize(model, req); print(f"synthesize, other thread: {time.perf_counter() - t:.2f} s, torch threads {torch.get_num_threads()}")
th = threading.Thread(target=in_thread); th.start(); th.join()
for rows in (1, 12):
    sched = ContinuousScheduler(lambda: model, SchedulerPolicy(rows, 16))
    t = time.perf_counter(); sched.submit(Part(req, threading.Event())).result()
    print(f"continuous, {rows} rows, whole: {time.perf_counter() - t:.2f} s")
