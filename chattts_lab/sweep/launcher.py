"""Where a sweep's worker processes come from: forked from a server that has imported torch and ChatTTS once.

A fresh Python spends about 5-7 s importing torch and ChatTTS before a cell can load its model; every cell paid it.
The standard library's forkserver (`multiprocessing`, start method "forkserver") is a clean interpreter, started
once per sweep process, that imports PRELOAD and then only forks: each worker is still a fresh process of its own
(its peak memory, thread pools and one-time costs die with it), but it starts with the imports done.

What keeps the cells apart: the server never runs a torch op and never sets a thread count, so no OpenMP pool
exists to be copied; each worker sizes its own pools (`worker_env`, then `torch.set_num_threads` at load) and
resets the high-water mark of its memory before measuring (chattts_lab.trackers.measure).

The worker speaks the same JSON lines as ever: its stdin and stdout are pipes to the supervisor, its stderr a file
the supervisor keeps for a crash's traceback (chattts_lab.sweep.supervisor).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import select
import signal
import sys
import threading
from contextlib import contextmanager

# Imported once by the server, so that no worker pays for them. Importing must not run torch ops or start threads.
PRELOAD = ["torch", "ChatTTS", "chattts_lab.models", "chattts_lab.synthesis", "chattts_lab.sweep.worker"]
_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)
_started = False  # whether this process has started its server (it then serves every later sweep of the process)


class ForkedWorker:
    """One worker forked from the server, answering what the supervisor asks of a process: `pid`, `stdin` and
    `stdout` (text pipes), `poll()`, `wait()`, `returncode` (negative: killed by that signal) and `kill()` (its
    whole process group)."""

    def __init__(self, entry: str, env: dict, stderr_path: str):
        child_in, self_in = _context.Pipe(duplex=False)  # (reader, writer): the worker reads what we write
        self_out, child_out = _context.Pipe(duplex=False)
        self.process = _context.Process(target=_run, args=(entry, env, stderr_path, child_in, child_out, os.getpid()),
                                        daemon=True)  # daemon: ended, not waited for, if the sweep exits first
        global _started
        with _main_script_hidden():
            self.process.start()
        _started = True
        child_in.close(), child_out.close()  # the worker holds its ends: ours closed, its exit reads as EOF
        self.stdin = _text(self_in, "w")
        self.stdout = _text(self_out, "r")
        self.pid = self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self) -> int:
        self.process.join()
        return self.process.exitcode

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)  # its own session: whatever it started goes too
        except (ProcessLookupError, PermissionError):
            self.process.kill()


def server_started() -> bool:
    """Whether this process's forkserver has been started: a sweep then pays no server start (an app's second sweep,
    a test after another)."""
    return _started


@contextmanager
def _main_script_hidden():
    """multiprocessing makes a worker re-import the parent's main script (as `__mp_main__`) so that functions defined
    there unpickle; ours live in modules, and a script such as app.py (gradio, a UI built) must not run again in
    every worker. Without `__file__` on `__main__` for the moment of the start, the worker skips it (`python -m`
    mains are skipped already)."""
    main = sys.modules["__main__"]
    script = main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        if script is not None:
            main.__file__ = script


def _text(conn, mode: str):
    """A pipe end as a text file (the JSON lines are written and read raw; the Connection only carried the fd)."""
    stream = open(os.dup(conn.fileno()), mode, buffering=1, encoding="utf-8")
    conn.close()
    return stream


def _die_with(pid: int) -> None:
    """Be killed, with all we started, when process `pid` (the sweep's) ends. The forkserver is no guide: its
    workers hold it open, so it outlives the sweep while one of them runs."""
    try:
        fd = os.pidfd_open(pid)  # Linux >= 5.3; readable once the process has ended
    except ProcessLookupError:  # it ended before we started
        os._exit(3)
    except (AttributeError, OSError):  # elsewhere the daemon flag and the supervisor's kill are what is left
        return

    def watch() -> None:
        select.select([fd], [], [])
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="die-with-the-sweep").start()


def _run(entry: str, env: dict, stderr_path: str, stdin, stdout, sweep_pid: int) -> None:
    """In the worker: its own session and environment, the pipes and the stderr file as fds 0-2, then `entry`."""
    os.setsid()
    _die_with(sweep_pid)
    # worker.die_with_parent checks its parent: ours is the forkserver (the watch above is what ends us with the sweep)
    os.environ.clear()
    os.environ.update({**env, "CHATTTS_LAB_PARENT_PID": str(os.getppid())})
    sys.stdout.flush(), sys.stderr.flush()
    err = os.open(stderr_path, os.O_WRONLY | os.O_APPEND)
    for fd, target in ((stdin.fileno(), 0), (stdout.fileno(), 1), (err, 2)):
        os.dup2(fd, target)
    os.unlink(stderr_path)  # the supervisor reads it through its own open file; nothing is left behind
    os.close(err), stdin.close(), stdout.close()
    sys.stdin = open(0, "r", encoding="utf-8", closefd=False)  # multiprocessing pointed it at /dev/null
    module, name = entry.split(":")
    sys.exit(getattr(importlib.import_module(module), name)())
