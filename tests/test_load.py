"""Load through the real app's queue: concurrent `gradio_client` users, and memory over many requests.

The load test reports how many requests were served, failed and lost; lost must be zero. Timings are
never asserted (the machine is shared); only counts, order (by the server's own file writes) and the
steady growth of memory are.
Run with `-rP` (or `-s`) to see the report and the RSS curve in the output.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import soundfile as sf

from tests.reliability_helpers import ascii_curve, rss_mb, server_pid, steady_growth_mb

SYNTH = dict(temperature=0.3, top_p=0.7, top_k=20, audio_seed=1, speed=5, max_new_token=12, split=False)
USERS = 8
JOB_DEADLINE_S = 600  # generous: the cores are shared; a job with no answer by then counts as lost


def _watch(job, seen: dict) -> None:
    """Record every queue position the user is shown."""
    from gradio_client.utils import Status

    while not job.done():
        st = job.status()
        if st.code == Status.IN_QUEUE and st.rank is not None:
            seen["ranks"].append(st.rank)
        time.sleep(0.01)


def _written_ns(app_dir, client_path: str) -> int:
    """When the server wrote this answer's audio file (the client's copy keeps the server's file name):
    the server's own order, which polling threads on a busy machine could not tell for jobs done close
    together."""
    server_file = app_dir / "outputs" / "audio" / Path(client_path).name
    assert server_file.is_file(), f"the server's file for {client_path} is not in {server_file.parent}"
    return server_file.stat().st_mtime_ns


def test_eight_users_at_once_are_all_served_in_order_with_queue_positions(app_url, app_dir):
    from gradio_client import Client
    from gradio_client.utils import Status

    clients = [Client(app_url, verbose=False) for _ in range(USERS)]  # one session per user
    clients[0].predict("Warm up.", "Aria", *SYNTH.values(), api_name="/synthesize")
    jobs, seen, watchers = [], [], []
    for i, client in enumerate(clients):
        job = client.submit(f"User {i + 1} asks for this sentence.", "Aria", *SYNTH.values(), api_name="/synthesize")
        deadline = time.monotonic() + 60
        while job.status().code in (Status.STARTING, Status.JOINING_QUEUE) and time.monotonic() < deadline:
            time.sleep(0.005)  # joined the queue before the next user clicks: the order is known
        assert job.status().code not in (Status.STARTING, Status.JOINING_QUEUE), f"user {i + 1} never joined the queue"
        record = {"ranks": [], "user": i + 1}
        watcher = threading.Thread(target=_watch, args=(job, record), daemon=True)
        watcher.start()
        jobs.append(job)
        seen.append(record)
        watchers.append(watcher)
    served, failed, lost = [], [], []
    t_end = time.monotonic() + JOB_DEADLINE_S
    for job, record in zip(jobs, seen):
        try:
            path, m = job.result(timeout=max(1.0, t_end - time.monotonic()))
            assert sf.info(path).frames > 0 and m["tokens"][0] > 0
            record["written_ns"] = _written_ns(app_dir, path)
            served.append(record["user"])
        except TimeoutError:
            lost.append(record["user"])
        except Exception as exc:  # noqa: BLE001 - counted and reported
            failed.append((record["user"], repr(exc)[:200]))
    for w in watchers:
        w.join(30)
    report = (f"load: {USERS} concurrent users -> served {len(served)}, failed {len(failed)}, lost {len(lost)}\n"
              + "\n".join(f"  user {r['user']}: queue positions shown {sorted(set(r['ranks']), reverse=True)}"
                          for r in seen))
    print(report)
    assert (len(served), failed, lost) == (USERS, [], []), report
    written = [r["written_ns"] for r in seen]
    assert written == sorted(written), f"served out of submission order: {report}"
    shown = [rank for r in seen for rank in r["ranks"]]
    # the last users waited behind several others' whole syntheses while being polled every 10 ms
    assert shown and max(shown) >= 1, f"no queue position was shown: {report}"
    for r in seen:  # nobody is ever told a position behind more people than joined before them
        assert all(rank <= r["user"] - 1 for rank in r["ranks"]), report


def _rss_curve(app_url: str, requests: int, every: int) -> list[float]:
    from gradio_client import Client

    pid = server_pid(app_url)
    client = Client(app_url, verbose=False)
    for _ in range(5):  # allocator pools, caches and lazily mapped weights settle first
        client.predict("Leak check.", "Aria", *{**SYNTH, "max_new_token": 4}.values(), api_name="/synthesize")
    curve = [rss_mb(pid)]
    for i in range(requests):
        client.predict(f"Leak check {i}.", "Aria", *{**SYNTH, "max_new_token": 4}.values(), api_name="/synthesize")
        if (i + 1) % every == 0:
            curve.append(rss_mb(pid))
    print(f"app RSS every {every} requests over {requests} requests:\n{ascii_curve(curve)}")
    return curve


def test_app_memory_stays_flat_over_60_requests(app_url):
    """The default run's short version (about 2 s a request on two busy cores); -m slow runs 400."""
    curve = _rss_curve(app_url, 60, 10)
    growth = steady_growth_mb(curve)  # 0.4 MB a request (far below one request's buffers) would read 4
    assert growth < 4, f"app RSS grows {growth:.1f} MB every 10 requests: {[round(c) for c in curve]}"


@pytest.mark.slow
def test_app_memory_stays_flat_over_400_requests(app_url):
    curve = _rss_curve(app_url, 400, 20)
    growth = steady_growth_mb(curve)
    assert growth < 4, f"app RSS grows {growth:.1f} MB every 20 requests: {[round(c) for c in curve]}"
