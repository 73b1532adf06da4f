"""Connecting this process to a Ray cluster, as fleet sweeps (chattts_lab.sweep.cluster) and Ray Serve
(chattts_lab.serve.rayserve) both do: the address, the cluster's token, and why a connection was refused.

Ray is optional (requirements-cluster.txt) and imported only when asked for a cluster. Tasks and actors run this
process's own `chattts_lab` code, shipped to every node as a Ray py_module.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from chattts_lab.checks import SpecError

PACKAGE_DIR = Path(__file__).resolve().parent  # the chattts_lab package, shipped to the nodes


def ray_module():
    try:
        import ray
    except ImportError as exc:
        raise SpecError("a Ray cluster needs Ray: pip install -r requirements-cluster.txt") from exc
    return ray


def address_of(cluster: str) -> str | None:
    """`ray` -> None (Ray's own choice: RAY_ADDRESS, a cluster started on this machine, else a new local one);
    `ray:ADDRESS` -> ADDRESS (host:port of a head, or ray://host:port)."""
    return cluster.partition(":")[2] or None


def connect(cluster: str):
    """The `ray` module, connected to `cluster` (reconnected if this process is connected elsewhere), its tasks
    and actors running this `chattts_lab`."""
    ray = ray_module()
    address = address_of(cluster)
    if ray.is_initialized():
        if address in (None, "auto", _connected_to.get("address"), ray.get_runtime_context().gcs_address):
            return ray
        ray.shutdown()
    use_token_if_here()
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                 runtime_env={"py_modules": [str(PACKAGE_DIR)]})
    except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as exc:
        raise SpecError(refused(address, exc)) from exc
    _connected_to["address"] = address
    return ray


# The address this process connected with, as given: Ray reports the head's own IP (192.0.2.2:6379 for a
# 127.0.0.1:6379 asked), and a second connect() to the same cluster would otherwise connect again.
_connected_to: dict[str, str | None] = {}


# How a machine gets a cluster's token, as Ray documents it (docs.ray.io/en/latest/ray-security/token-auth.html).
TOKEN_HOWTO = ("on the head, `ray get-auth-token` prints the cluster's token; here, set RAY_AUTH_TOKEN to it, or "
               "write it to ~/.ray/auth_token (or to a file named by RAY_AUTH_TOKEN_PATH)")


def use_token_if_here() -> None:
    """Token authentication on for this process when RAY_AUTH_MODE is unset and a token is here (RAY_AUTH_TOKEN,
    RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token): what `ray start --head` decides. Ray 2.60's `ray.init` decides so
    only for a cluster it finds by itself, never at a given address, so without this a client that holds the
    cluster's token would still be refused. An explicit RAY_AUTH_MODE is left as it is. (Ray's own helper for
    this also logs "set RAY_AUTH_MODE=disabled to opt out", advice a client of a cluster has no use for.)"""
    if os.environ.get("RAY_AUTH_MODE") is not None or not token_here():
        return
    try:
        from ray._private.authentication.authentication_token_setup import _enable_token_auth
    except ImportError:  # a Ray that moved it: its own defaults
        return
    _enable_token_auth()  # RAY_AUTH_MODE=token for this process and what it starts, Ray's config reloaded


def token_here() -> bool:
    """Whether this machine holds a Ray token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)."""
    try:
        from ray._raylet import AuthenticationTokenLoader
    except ImportError:
        return False
    return AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True)


def refused(address: str | None, exc: Exception) -> str:
    """Why `ray.init` failed, with what to set: Ray says only that it failed to connect, and a token missing or
    wrong (logged, not raised) looks the same as a head that is not there."""
    said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    mode = os.environ.get("RAY_AUTH_MODE", "token")
    if mode.lower() != "token":
        token = f"RAY_AUTH_MODE is {mode!r} here, so no token is sent: unset it, or set it to token"
    elif token_here():
        token = ("this machine's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) may not be the "
                 "cluster's: compare it with what `ray get-auth-token` prints on the head")
    else:
        token = f"this machine has no Ray token, and a cluster with token authentication refuses it: {TOKEN_HOWTO}"
    return (f"cannot connect to the Ray cluster at {address or 'this machine'}: {said}. Check that its head runs "
            f"there (`ray start --head --port PORT`); {token}")
