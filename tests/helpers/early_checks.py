"""mypy over backend/, started as the run's collection ends rather than when its test comes up.

mypy takes about a minute of one core on a fresh cache; run inside its test it held a test process
for that minute. Started at the lowest CPU priority when the run begins, it uses the cores the tests
leave idle (a browser test waits on its page, an API test on its server) and yields to them
otherwise, so the timing checks (`alone`) see no load from it. Its test then reads the answer,
waiting if it is not there yet. Whichever test process collects first starts it (an exclusive
create of a marker file in a folder named for the run); one run, one mypy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MYPY_TEST = "tests/unit/test_architecture.py::test_mypy_finds_nothing_in_backend"
_started: list[tuple[subprocess.Popen, Path]] = []


def mypy_command(root: Path, cache: Path) -> list[str]:
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent)) or shutil.which("mypy")
    assert mypy, "mypy is in requirements-dev.txt: run `bash scripts/install.sh --dev`"
    return [mypy, "--config-file", str(root / "pyproject.toml"), "--cache-dir", str(cache)]


def _folder(config) -> Path:
    run = getattr(config, "workerinput", {}).get("testrunuid") or f"pid{os.getpid()}"
    return Path(tempfile.gettempdir()) / f"workbench-early-{os.getuid()}-{run}"


def start(session, root: Path) -> None:
    """At the end of collection: start mypy if this run will run its test and no process has yet."""
    if MYPY_TEST not in {item.nodeid for item in session.items}:
        return
    folder = _folder(session.config)
    folder.mkdir(exist_ok=True)
    try:
        os.close(os.open(folder / "started", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    with open(folder / "output", "w") as out:
        proc = subprocess.Popen(
            mypy_command(root, folder / "cache"),
            cwd=root,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: os.nice(19),
        )
    _started.append((proc, folder))
    # the exit status is written by a thread of this process, the one that can wait for mypy
    import threading

    def record():
        rc = proc.wait()
        (folder / "rc.part").write_text(str(rc))
        (folder / "rc.part").rename(folder / "rc")

    threading.Thread(target=record, daemon=True, name="mypy-early").start()


def mypy_result(config, timeout: float = 600) -> tuple[int, str] | None:
    """(exit status, output) of the mypy started for this run, waiting for it to end; None when no
    process started one (a run that collected the test some other way)."""
    folder = _folder(config)
    if not (folder / "started").exists():
        return None
    deadline = time.monotonic() + timeout
    while not (folder / "rc").exists():
        assert time.monotonic() < deadline, f"mypy started for this run has not ended in {timeout:.0f} s"
        time.sleep(0.5)
    return int((folder / "rc").read_text()), (folder / "output").read_text()


def stop() -> None:
    """At the end of the process that started it: stop a mypy still running, remove its folder."""
    for proc, folder in _started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
    _started.clear()
