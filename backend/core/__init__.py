"""Device, presets, caches, intervention contexts and the ZeroGPU shim shared by every method."""

from .cache import ByteLRUCache, all_caches, make_key
from .device import pick_device, pick_dtype
from .zerogpu import gpu
from .interventions import (
    count_hooks,
    edit_output,
    locked,
    model_lock,
    scale_channels,
    scale_channels_many,
    scale_weights,
    steer,
    zero_channels,
)
from .presets import Preset, PresetError, load_pretrained, load_preset

__all__ = [
    "ByteLRUCache",
    "all_caches",
    "make_key",
    "pick_device",
    "pick_dtype",
    "gpu",
    "count_hooks",
    "edit_output",
    "locked",
    "model_lock",
    "scale_channels",
    "scale_channels_many",
    "scale_weights",
    "steer",
    "zero_channels",
    "Preset",
    "PresetError",
    "load_pretrained",
    "load_preset",
]
