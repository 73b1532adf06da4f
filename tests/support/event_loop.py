"""Running asyncio code from a test, whatever ran before it in this test process."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor


def in_own_thread(function, *args):
    """function(*args) in a thread of its own, for code that calls asyncio.run: once a browser test has run in this
    process, Playwright's sync API keeps an event loop running in the main thread, and asyncio.run there refuses
    ("cannot be called from a running event loop")."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(function, *args).result()


def run_in_fresh_loop(coroutine):
    return in_own_thread(asyncio.run, coroutine)
