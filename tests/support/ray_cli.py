"""A Ray cluster on this machine started as the README starts one: `ray get-auth-token --generate`, then
`RAY_AUTH_MODE=token ray start --head ...` and `RAY_AUTH_MODE=token RAY_AUTH_TOKEN=... ray start --address ...`,
each in a subprocess. Each node is one process group of the test's own (its `ray start` session), so a node is
lost by killing that group, and the cluster is stopped without `ray stop` (which would end every Ray process
on the machine, another test run's included).

Test-only differences from the README, each for isolation or a shared machine: the token file is a temporary one
(RAY_AUTH_TOKEN_PATH, Ray's own variable for it, instead of ~/.ray/auth_token), every port is a free one, Ray's
files go to a temporary folder, the dashboard loads no modules (its API server still runs), and Ray's own
settings (RAY_<name> variables) mark a lost node dead after five missed health checks a second apart and turn
its memory monitor off (on a machine whose memory other work fills, it would kill cells and replicas). Five misses,
not two half a second apart: with three test processes on 2 cores a live raylet missed two 500 ms checks and was
marked dead, and Ray Serve's deployment never came up (docs/measurements/2026-12-02-test-run.md).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

from bench.serving.loadtest import free_port

RAY = str(Path(sys.executable).parent / "ray")
WAIT_S = 300  # an upper bound for a slow shared machine, never a synchronisation: each wait ends on its condition
RAY_TEST_SETTINGS = {"RAY_health_check_initial_delay_ms": "0", "RAY_health_check_period_ms": "1000",
                     "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "5",
                     "RAY_memory_monitor_refresh_ms": "0", "RAY_USAGE_STATS_ENABLED": "0"}
NODE_CPUS = 1


class CliCluster:
    """A head and further nodes, each started by `ray start` with token authentication, one CPU and a label."""

    def __init__(self):
        # Short: Ray's sockets live under it, and a Unix socket's path has at most 107 characters.
        self.folder = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
        self.token_file = self.folder / "home" / ".ray" / "auth_token"
        self.groups: dict[str, int] = {}  # label -> the process group of its node
        self.address = ""
        self.token = ""

    @property
    def client_env(self) -> dict:
        """A client on the head's machine: the token in its file, nothing else set (RAY_AUTH_MODE unset)."""
        return {**os.environ, "RAY_AUTH_TOKEN_PATH": str(self.token_file)}

    def start(self, head_label: str) -> None:
        """`ray get-auth-token --generate` (where the README's runs, in a HOME of its own), then the head."""
        home = {**without_auth(os.environ), "HOME": str(self.token_file.parents[1])}
        generated = subprocess.run([RAY, "get-auth-token", "--generate"], env=home, capture_output=True, text=True,
                                   timeout=WAIT_S)
        assert generated.returncode == 0 and self.token_file.exists(), generated.stderr
        self.token = generated.stdout.strip().splitlines()[-1]
        port = free_port()
        self._start(head_label, {**self.client_env, "RAY_AUTH_MODE": "token"}, "--head", "--port", str(port),
                    "--include-dashboard", "false", "--dashboard-port", str(free_port()),
                    "--ray-client-server-port", str(free_port()),
                    "--temp-dir", str(self.folder / "ray"))
        self.address = f"127.0.0.1:{port}"

    def add_node(self, label: str) -> None:
        """Another machine's node: the token passed in RAY_AUTH_TOKEN, as the README passes it."""
        self._start(label, {**without_auth(os.environ), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token},
                    "--address", self.address)

    def _start(self, label: str, env: dict, *args: str, attempts: int = 3) -> None:
        """`ray start`, again (its processes killed first) when it gives up: Ray waits a fixed 30 s for a new
        raylet to register, which a machine loaded many times over can exceed (then `ray start` exits 1)."""
        for _ in range(attempts):
            with open(self.folder / f"{label}.log", "a") as log:
                started = subprocess.Popen(
                    [RAY, "start", *args, "--num-cpus", str(NODE_CPUS), "--resources", json.dumps({label: 1}),
                     "--dashboard-agent-listen-port", str(free_port()), "--metrics-export-port", str(free_port()),
                     "--runtime-env-agent-port", str(free_port())],
                    env={**env, **RAY_TEST_SETTINGS}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            self.groups[label] = started.pid  # a session leader's pid is its group's id, its daemons' too
            if started.wait(WAIT_S) == 0:
                return
            self.kill_node(label)
        log = (self.folder / f"{label}.log").read_text()
        raise AssertionError(f"ray start ({label}) failed {attempts} times:\n{log[-3000:]}")

    def processes(self, label: str) -> list[psutil.Process]:
        """Every process of the node: its group (raylet, agents, workers) and what those started."""
        group = [p for p in psutil.process_iter() if _group_of(p) == self.groups[label]]
        return group + [c for p in group for c in _children(p) if c not in group]

    def kill_node(self, label: str, sig: int = signal.SIGKILL) -> None:
        """The machine gone at once: every process of its `ray start` group killed."""
        try:
            os.killpg(self.groups.pop(label), sig)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        """Every node killed (Ray's processes take many seconds to end on SIGTERM; a test's cluster keeps nothing)."""
        for label in list(self.groups):
            self.kill_node(label)
        shutil.rmtree(self.folder, ignore_errors=True)

    def log_lines(self, pattern: str) -> list[str]:
        """The lines of the cluster's Ray logs (every node writes under the head's temporary folder) matching a
        file pattern, e.g. `serve/replica_*.log`."""
        paths = {path.resolve() for path in (self.folder / "ray").glob(f"session_*/logs/{pattern}")}  # once each:
        return [line for path in sorted(paths)  # session_latest links to the session's own folder
                for line in path.read_text(errors="replace").splitlines()]


def _group_of(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except (ProcessLookupError, PermissionError):
        return None


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except psutil.Error:
        return []


def without_auth(env) -> dict:
    """An environment with none of Ray's token settings: a machine that has not been given the token."""
    return {k: v for k, v in env.items() if not k.startswith("RAY_AUTH")}
