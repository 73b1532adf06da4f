"""Why a lab synthesis runs ~2x slower on a thread other than the first one that ran torch (2026-12-02).

Full-size synthetic weights, lab int8, 2 threads, 64 tokens, 3 calls each; run from the checkout:
  python scripts/probes/omp_pools.py            (load in thread A, then B, then main, then C)
  MODE=main python scripts/probes/omp_pools.py  (everything in the main thread)
See docs/measurements/2026-12-02-openmp-pools.md for the numbers and the explanation."""
import sys, time, os, threading
sys.path.insert(0, os.getcwd())
from chattts_lab import SynthesisRequest
from chattts_lab.models import LoadConfig, load_model
from chattts_lab.synthesis import warm_up, synthesize
req = SynthesisRequest.of("A listener who arrives alone and wants to hear it at once.", max_new_token=64, min_new_token=64)
box = {}
def load():
    box["m"] = load_model(LoadConfig(model="synthetic", precision="int8", engine="lab", threads=2)); warm_up(box["m"])
def timed(out):
    for _ in range(3):
        t = time.perf_counter(); synthesize(box["m"], req); out.append(round(time.perf_counter() - t, 2))
mode = os.environ.get("MODE")
if mode == "main":
    load(); a = []; timed(a); print("all in main", a)
else:
    th = threading.Thread(target=load); th.start(); th.join()   # the loader's pool ends with its thread
    a = []; th = threading.Thread(target=timed, args=(a,)); th.start(); th.join(); print("load in thread A (exited), synth in thread B", a)
    b = []; timed(b); print("then synth in main", b)
    c = []; th = threading.Thread(target=timed, args=(c,)); th.start(); th.join(); print("then thread C after main ran", c)
