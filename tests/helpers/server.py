"""Serve the app on 127.0.0.1, in a child process (`serve`: e2e and network tests) or in the test's own
process (`in_process`: api tests, which look at the server's state)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, proc: subprocess.Popen | None = None, timeout: float = 120.0) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"app exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return time.perf_counter() - t0
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


@contextlib.contextmanager
def serve(
    args: list[str] | None = None,
    env: dict | None = None,
    python: list[str] | None = None,
    log_path: Path | None = None,
    app_path: Path | None = None,
):
    """Yield (url, process). The child is killed on exit whatever happens."""
    port = free_port()
    full_env = {
        **os.environ,
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    cmd = (python or [sys.executable]) + [str(app_path or ROOT / "app.py"), "--port", str(port), "--host", "127.0.0.1"]
    log = open(log_path, "w") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(cmd + (args or []), cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_until_up(url, proc)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        if log_path:
            log.close()


FROZEN_BY_START: dict[str, int] = {}  # an in-process server's URL → the objects its start froze


@contextlib.contextmanager
def in_process(mcp: bool = False, attempts: int = 3):
    """Yield the URL of the zoo app launched in this process, as `python app.py` serves it (with its
    MCP tools where `mcp`): the start's objects frozen out of the collector's passes (app.frozen_start).
    Gradio's check that localhost answers can time out on a busy machine, so the launch is tried
    `attempts` times."""
    import gc

    import app

    demo = app.build_app("zoo")
    if mcp:
        from components.agents import tools as agent_tools

        agent_tools.install(demo, "zoo")
    for attempt in range(attempts):
        port = free_port()
        try:
            demo.launch(
                server_name="127.0.0.1",
                server_port=port,
                prevent_thread_lock=True,
                quiet=True,
                **({"mcp_server": True} if mcp else {}),
                **app.launch_kwargs(),
            )
            break
        except ValueError:
            demo.close()
            if attempt == attempts - 1:
                raise
    before = gc.get_freeze_count()
    app.frozen_start()  # as main() does: no collector pass over the start's objects holds the server
    url = f"http://127.0.0.1:{port}/"
    FROZEN_BY_START[url] = gc.get_freeze_count() - before
    try:
        yield url
    finally:
        FROZEN_BY_START.pop(url, None)
        demo.close()
