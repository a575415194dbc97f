"""Seeded use of the process-wide random generator, one request at a time.

Libraries that draw from torch's global generator (captum's NoiseTunnel, peft's LoRA init and fast
SVD probes) cannot be given a generator of their own. `seeded(seed)` serialises such sections
across threads, seeds the global generator inside and restores its state afterwards, so a result
depends on its seed only — never on what another request drew at the same moment (every draw
from the global generator in the project goes through here; the rest uses its own generators).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import torch

_GLOBAL_RNG = threading.RLock()


@contextmanager
def seeded(seed: int):
    with _GLOBAL_RNG, torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield
