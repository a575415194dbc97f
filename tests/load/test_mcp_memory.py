"""Issue 51 (6): memory an agent's large MCP calls leave behind in the served app.

Ten `math_neurons` calls with 5,000 `math_items` each took the server from 779 to 1,488 MB, and
204 MB stayed after the app's own collection: every agent's set stayed in the shared bench for
good. Here a served app (`app.py --mcp`, its own process, so its RSS is its own) answers six such
calls, a gradio_client session comes and goes (the app collects and trims its heap when it releases
a session, components.serving.session_memory) and the server's VmRSS must come back within 20 MB of where
it was before the calls (it stayed ~+36 MB above before the fix).
"""
import asyncio
import time

import pytest

pytest.importorskip("mcp")

from tests.conftest import ARTIFACTS  # noqa: E402
from tests.helpers.server import serve  # noqa: E402

CALLS, ITEMS, KEPT_MB = 6, 5000, 20.0
SETTLE_S = 60.0  # a closed session is released after 10 s, swept every 5 s, then collected


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def _items(seed: int, n: int) -> list[dict]:
    from backend.mathneuro import data

    return [{"question": it["prompt"], "answer": it["answer"]} for it in data.math_set(n, seed)]


def _call(url: str, **args):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def run():
        async with streamablehttp_client(url + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as s:
                await s.initialize()
                return await s.call_tool("math_neurons", args)

    return asyncio.run(run())


@pytest.mark.timeout(420)
def test_large_mcp_calls_leave_no_memory_behind_after_a_collection():
    from gradio_client import Client

    ARTIFACTS.mkdir(exist_ok=True)
    log = ARTIFACTS / "mcp-memory-server.log"
    with serve(["--mcp"], log_path=log) as (url, proc):
        warm = _call(url, k_percent=3, n_samples=8, math_items=_items(10_000, 20))
        assert not warm.isError, warm.content
        time.sleep(2)
        start = _rss_mb(proc.pid)
        peak = start
        for i in range(CALLS):
            res = _call(url, k_percent=3, n_samples=8, math_items=_items(i, ITEMS))
            assert not res.isError, res.content
            peak = max(peak, _rss_mb(proc.pid))
        before = _collections(log)
        visitor = Client(url, verbose=False)  # a session that ends: the app's collection follows
        visitor.predict(api_name="/status")
        visitor.close()
        t0 = time.monotonic()
        # the figure is read after a collection that followed the calls (the server logs each one)
        while _collections(log) == before and time.monotonic() - t0 < SETTLE_S:
            time.sleep(1)
        collected = _collections(log) > before
        while (now := _rss_mb(proc.pid)) - start > KEPT_MB and time.monotonic() - t0 < SETTLE_S:
            time.sleep(1)
    print(f"VmRSS {start:.0f} MB before, {peak:.0f} MB at most during {CALLS} calls of {ITEMS} items, "
          f"{now:.0f} MB after the collection")
    assert collected, f"no collection within {SETTLE_S:.0f} s of the session's end (see {log})"
    assert now - start <= KEPT_MB, f"{now - start:+.0f} MB kept after {CALLS} calls of {ITEMS} items"


def _collections(log) -> int:
    return log.read_text(errors="replace").count("collected the heap after releasing sessions")
