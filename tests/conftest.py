import os
import sys
from pathlib import Path

import pytest

# No test touches the network: set before anything imports gradio or huggingface_hub.
os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("WORKBENCH_PRESET", "zoo")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(autouse=True)
def _fresh_model_checks():
    """Each test checks custom models afresh: the picker remembers checks for minutes, and tests
    rewrite folders under paths a previous test may have checked."""
    from backend.core import picker

    picker.forget()
    yield


def pytest_terminal_summary(terminalreporter, exitstatus):
    """After a failed run, the internal errors the served apps logged (their tracebacks live only in
    test-artifacts/*.log, which a CI run's printout does not include)."""
    if exitstatus == 0 or not ARTIFACTS.is_dir():
        return
    for log in sorted(ARTIFACTS.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        starts = [i for i, line in enumerate(lines) if "internal error in" in line]
        for i in starts[:3]:
            terminalreporter.write_sep("-", f"{log.name}: line {i + 1} of {len(starts)} internal error(s)")
            terminalreporter.write_line("\n".join(line[:300] for line in lines[i:i + 40]))
