"""Reference images for NeMo's comparisons: a user's upload checked and converted, and resized to
the generations' size. Pure numpy/PIL (no model), so the tab can check an upload before it queues."""

from __future__ import annotations

import numpy as np


def as_reference(image) -> np.ndarray:
    """A user's image (uint8 or float array, H×W×3/4 or H×W) → float32 RGB in [0, 1]."""
    a = np.asarray(image)
    if a.ndim == 2:
        a = np.repeat(a[..., None], 3, -1)
    if a.ndim != 3 or a.shape[-1] not in (3, 4) or min(a.shape[:2]) < 8:
        raise ValueError("The reference must be an RGB image of at least 8×8 pixels.")
    a = a[..., :3]
    a = a.astype(np.float32) / 255.0 if a.dtype == np.uint8 or a.max() > 1.0 else a.astype(np.float32)
    if not np.isfinite(a).all():
        raise ValueError("The reference image holds invalid values.")
    return np.clip(a, 0.0, 1.0)


def resize_to(image: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    """Resize (bicubic, via PIL) so SSIM compares pixel for pixel with the generations."""
    from PIL import Image

    im = Image.fromarray((np.clip(image, 0, 1) * 255).round().astype(np.uint8))
    return np.asarray(im.resize((int(hw[1]), int(hw[0])), Image.Resampling.BICUBIC), np.float32) / 255
