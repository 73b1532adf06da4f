"""Stand-ins for the sweep's worker (`supervisor.WORKER_ENTRY`) that misbehave on purpose: forked like the real one
(chattts_lab.sweep.launcher), so a test sees what the supervisor does when a worker dies or hangs."""

import os
import signal
import sys
import time


def dying() -> int:
    print("dying", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    return 0


def hanging() -> int:
    time.sleep(3600)
    return 0


def threads_and_parent() -> int:
    """Answers as the real worker does with what a fresh worker inherited: its threads, its environment, the
    server's threads (the server must have none running that a fork could copy mid-operation)."""
    import json

    import torch

    server = len(os.listdir(f"/proc/{os.getppid()}/task"))
    task = json.loads(sys.stdin.readline())
    answer = {"status": "ok", "reason": "", "torch_threads": torch.get_num_threads(), "task": task,
              "omp": os.environ.get("OMP_NUM_THREADS"), "server_threads": server, "pid": os.getpid()}
    print("\nCHATTTS_LAB_RESULT " + json.dumps(answer), flush=True)
    return 0


def is_worker(proc) -> bool:
    """A sweep worker: a child of a forkserver (chattts_lab.sweep.launcher). Workers share the server's command
    line, so they are known by their parent."""
    import psutil

    try:
        parent = proc.parent()
        return parent is not None and "multiprocessing.forkserver" in " ".join(parent.cmdline()) \
            and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:  # ended meanwhile
        return False


def running_workers(pid: int | None = None) -> list:
    """The sweep workers a process (this one by default) started, oldest first."""
    import psutil

    try:
        found = [c for c in psutil.Process(pid).children(recursive=True) if is_worker(c)]
    except psutil.NoSuchProcess:
        return []
    return sorted(found, key=lambda p: p.create_time())
