"""The quick preset as the app runs it (spec_from_form(ctx.policy.model, quick_form())), on a fresh history: the estimate
before the run (reference figures), the run's wall time, each cell's parts, and the estimate from the run's own rows.

    .venv/bin/python scripts/probes/quick_preset.py auto /tmp/quick-auto          # the app's default weights
    .venv/bin/python scripts/probes/quick_preset.py synthetic-tiny /tmp/quick-tiny
"""
import json, os, sys, time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from webui.benchmark.sweep_form import quick_form, spec_from_form
from chattts_lab.sweep import grid
from chattts_lab.sweep.runner import run_sweep
from chattts_lab.history.store import Store

model, out = sys.argv[1], Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
db = out / "lab.sqlite"
spec = spec_from_form(model, quick_form(), None)
before = grid.estimate_grid(spec, None)
t0 = time.perf_counter()
for _ in run_sweep(spec, db):
    pass
wall = time.perf_counter() - t0
after = grid.estimate_grid(spec, db)
hist = grid.machine_history(db)
passes = spec.interleaved_passes(len(spec.expand()))
cells = []
for r in Store(db).results(1):
    c = r.config
    ref_step = grid.reference_step_ms(c)
    est_step, est_over = grid.step_ms_and_overhead(c, [])
    cells.append(dict(cell=f"{c.engine} {c.precision}", status=r.status, step_ms=r.step_ms, ref_step_ms=ref_step,
                      elapsed_s=r.elapsed_s, worker_busy_s=r.extra.get("worker_busy_s"),
                      p50_s=r.latency.p50 if r.latency else None, ref_call_s=grid.call_s(c, []),
                      ref_overhead_s=est_over, ref_cell_s=grid.estimate_cell_s(c, [], passes),
                      hist_cell_s=grid.estimate_cell_s(c, hist, passes),
                      overhead_s=[h.overhead_s for h in hist if h.config == c]))
res = dict(model=model, wall_s=wall, estimate_before_s=before.seconds, estimate_after_s=after.seconds,
           sum_cells_s=sum(x["elapsed_s"] for x in cells), cells=cells, load=os.getloadavg())
print(json.dumps(res, indent=1, default=str))
(out / "result.json").write_text(json.dumps(res, indent=1, default=str))
