"""Where the app listens: a port named with `--port` that another server holds is refused at the start, in one line,
instead of after the page is built, with Gradio's traceback (left out, Gradio finds a free port from 7860 itself)."""

from __future__ import annotations

import errno
import socket

PORT_TAKEN = "is taken by another server"  # what bench.serving.loadtest looks for in an app's log


def port_taken(port: int) -> str:
    return f"port {port} {PORT_TAKEN}: stop that server or choose another port with --port"


def refuse_taken_port(port: int | None) -> None:
    """SystemExit with `port_taken` where `port` is named and cannot be bound. Checked as Gradio checks it before it
    starts its server (gradio.http_server.start_server: SO_REUSEADDR, on 127.0.0.1), so what passes here fails there
    only if the port is taken in between (then app.py says the same)."""
    if port is None:
        return
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:  # anything else (a port below 1024 without root) is Gradio's to say
                raise SystemExit(port_taken(port)) from None
