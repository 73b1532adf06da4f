"""Write tests/data/stored-cdbcb55/: a history, a bundle and a voice card as main at cdbcb55 wrote them.

tests/history/test_stored_data.py opens, lists, compares and resumes them with today's code, so a change to the specs,
the store or the validators that would lose what users have stored fails there. Run once, with the code of the
commit the folder is named after (never again afterwards: the point is that the files are old):

    python tests/data/make_stored_fixtures.py            # about a minute on 2 cores (tiny synthetic weights)

The history holds a finished interleaved sweep (2 ok cells with 2 passes, 2 cells skipped by rule, fidelity), a
stopped sweep whose one pending cell is skipped by rule on any machine (so resuming it starts no worker), and a
serving run (kind: serve). The bundle is every sweep of that history.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from chattts_lab.requests import Refine, Sampling  # noqa: E402
from bench.serving.loadtest import ServeSpec, run_serving  # noqa: E402
from chattts_lab.sweep.spec import SweepSpec  # noqa: E402
from chattts_lab.history.bundle import export_bundle  # noqa: E402
from chattts_lab.sweep.runner import CellFinished, run_sweep  # noqa: E402
from chattts_lab.voices import VoiceCard  # noqa: E402

NEVER_HERE = 4096  # MAX_THREADS: more threads than any machine's usable cores, so the rule table skips the cell
TINY = dict(model="synthetic-tiny", tokens=(4,), warmup=0)


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    out = Path(__file__).parent / f"stored-{commit}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    db = out / "history.sqlite"
    finished = SweepSpec(**TINY, precisions=("fp32", "bf16"), threads=(1, NEVER_HERE), passes=2, fidelity=True,
                         fidelity_tokens=4)
    assert list(run_sweep(finished, db))[-1].status == "finished"
    stopped = []
    for event in run_sweep(SweepSpec(**TINY, threads=(1, NEVER_HERE), passes=1, fidelity=False), db,
                           should_stop=lambda: bool(stopped)):
        if isinstance(event, CellFinished):
            stopped.append(True)  # the first cell is kept; the second is left to --resume
    assert event.status == "cancelled", event
    serve = ServeSpec(model="synthetic-tiny", users=(1,), requests_per_user=1, max_batches=(1,), tokens=8)
    assert list(run_serving(serve, db))[-1].status == "finished"
    export_bundle(db, out / "bundle.json")
    conn = sqlite3.connect(db)  # one self-contained file (no -wal beside it)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    card = VoiceCard(name="Fixture voice", seed=2222, sampling=Sampling(temperature=0.5, top_p=0.8, top_k=10,
                                                                      audio_seed=7),
                     refine=Refine(enabled=True, oral=1, laugh=1, break_=3), speed=4)
    (out / "voice-card.json").write_text(card.to_json(), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
