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
