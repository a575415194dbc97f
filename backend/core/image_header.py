"""An uploaded image's size read from its header, before any pixel is decoded or any byte of it is
written: a picture past the bound, or a file that is no picture, is refused while it costs a few
kilobytes of reading (a 40-megapixel PNG decodes to 120 MB; a zip entry named .png may unpack to
hundreds of MB of zeros). PIL's `Image.open` is lazy: it parses the header and stops."""
from __future__ import annotations

from typing import BinaryIO

from PIL import Image, UnidentifiedImageError

# An honest image file holds at most its pixels at 16 bytes each (RGBA in 32-bit floats, the widest
# a TIFF stores; PNG and JPEG take far less) plus metadata (colour profiles, EXIF, thumbnails).
BYTES_PER_PIXEL = 16
METADATA_BYTES = 4 * 2**20


def size_of(f: BinaryIO | str, name: str) -> tuple[int, int]:
    """(width, height) from the header of `f` (a path or a seekable file object)."""
    try:
        with Image.open(f) as im:
            return im.size
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise ValueError(f"{name} could not be read as an image ({type(e).__name__}); nothing was indexed.") from e


def check(size: tuple[int, int], name: str, max_side: int, n_bytes: int | None = None) -> None:
    """Refuse a picture larger than `max_side` px a side (the bound of every image input of the
    tab), or a file larger than its pixels can honestly take (`n_bytes`, as a zip declares it)."""
    w, h = size
    if max(w, h) > max_side:
        raise ValueError(f"{name} is {w}×{h} px; at most {max_side} px a side (as for Analyse and Steer). "
                         "Nothing was indexed.")
    if min(w, h) < 2:
        raise ValueError(f"{name} is {w}×{h} px; an image must be at least 2 px on each side. Nothing was indexed.")
    if n_bytes is not None and n_bytes > w * h * BYTES_PER_PIXEL + METADATA_BYTES:
        raise ValueError(f"{name} declares {n_bytes / 1e6:.1f} MB for a {w}×{h} px picture, far more than its "
                         "pixels take: refused. Nothing was indexed.")
