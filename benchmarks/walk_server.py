"""The app as benchmarks/hub_walk.py serves it: app.py unchanged, with two settings a CPU walk needs
and a Space does not, both from the environment and both named in the walk's table:

- WALK_SAE_HOOKPOINT: the Features tab's SAE hookpoint (default `model.layers.24`). A CPU walk
  builds LLaVA-NeXT-8B's language model at its real width with 2 layers, so the SAE sits on the
  last of them (`model.layers.1`).
- WALK_NEMO_STATS_N: how many COCO captions the Memorization tab computes its neuron statistics
  over when none are precomputed (default 1000, minutes of full-size UNet forwards on a CPU).

    python benchmarks/walk_server.py --port 7860 --host 127.0.0.1
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def apply_settings() -> None:
    hookpoint = os.environ.get("WALK_SAE_HOOKPOINT")
    if hookpoint:
        from backend.sae import loading, organism

        organism.HUB_HOOKPOINT = hookpoint
        organism.HUB_PRESET.extra["hookpoint"] = hookpoint
        defaults = list(loading.hub_shell.__defaults__)
        defaults[2] = hookpoint  # (model_id, sae_id, hookpoint)
        loading.hub_shell.__defaults__ = tuple(defaults)
    stats_n = os.environ.get("WALK_NEMO_STATS_N")
    if stats_n:
        from backend.nemo import service

        service.HUB_STATS_N = int(stats_n)


if __name__ == "__main__":
    apply_settings()
    sys.argv[0] = str(ROOT / "app.py")
    runpy.run_path(str(ROOT / "app.py"), run_name="__main__")
