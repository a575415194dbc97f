"""An image's size read from its header, before any pixel is decoded: a picture past the bound, or a
file that is no picture, is refused while it costs a few kilobytes of reading. A 13000×13000 PNG of
half a megabyte decodes to 507 MB as RGB, and Gradio's and Pillow's conversions take several times
that at once; a zip entry named .png may unpack to hundreds of MB of zeros. PIL's `Image.open` is
lazy: it parses the header and stops.

Every image input (a tab's upload, the same endpoint over the API, an MCP tool's `image_base64`, a
file of an index build) passes `check_file` first, with the one bound `bounds.IMAGE_SIDE`.
"""

from __future__ import annotations

import re
from typing import BinaryIO

from PIL import Image, UnidentifiedImageError

from . import bounds

# An honest image file holds at most its pixels at 16 bytes each (RGBA in 32-bit floats, the widest
# a TIFF stores; PNG and JPEG take far less) plus metadata (colour profiles, EXIF, thumbnails).
BYTES_PER_PIXEL = 16
METADATA_BYTES = 4 * 2**20
MAX_SIDE = int(bounds.IMAGE_SIDE.hi)


class Unreadable(ValueError):
    """The file is not an image Pillow can read (damaged, not a picture)."""


class TooLarge(ValueError):
    """The picture is past the bound; the message names its size and the bound."""


def size_of(f: BinaryIO | str, name: str, then: str = "Nothing was indexed.") -> tuple[int, int]:
    """(width, height) from the header of `f` (a path or a seekable file object)."""
    try:
        with Image.open(f) as im:
            return im.size
    except Image.DecompressionBombError as e:
        # Pillow refuses a header past twice its own pixel limit before it tells the size: the count
        # it names is the picture's
        found = re.search(r"\((\d+) pixels\)", str(e))
        pixels = f"{int(found.group(1)) / 1e6:.0f} megapixels" if found else "over 179 megapixels"
        raise TooLarge(f"{name} is {pixels}; at most {MAX_SIDE}×{MAX_SIDE} px. {then}") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise Unreadable(f"{name} could not be read as an image ({type(e).__name__}). {then}") from e


def check(
    size: tuple[int, int],
    name: str,
    max_side: int = MAX_SIDE,
    n_bytes: int | None = None,
    then: str = "Nothing was indexed.",
) -> None:
    """Refuse a picture larger than `max_side` px a side (the bound of every image input), or a file
    larger than its pixels can honestly take (`n_bytes`, as a zip declares it)."""
    w, h = size
    if max(w, h) > max_side:
        raise TooLarge(f"{name} is {w}×{h} px; at most {max_side} px a side. {then}")
    if min(w, h) < 2:
        raise TooLarge(f"{name} is {w}×{h} px; an image must be at least 2 px on each side. {then}")
    if n_bytes is not None and n_bytes > w * h * BYTES_PER_PIXEL + METADATA_BYTES:
        raise TooLarge(
            f"{name} declares {n_bytes / 1e6:.1f} MB for a {w}×{h} px picture, far more than its "
            f"pixels take: refused. {then}"
        )


def check_file(f: BinaryIO | str, name: str, then: str = "Nothing was computed.") -> tuple[int, int]:
    """The header of an image input read and held against the bound, before anything decodes it:
    its (width, height), or `Unreadable` / `TooLarge` with a message for the visitor."""
    size = size_of(f, name, then)
    check(size, name, then=then)
    if hasattr(f, "seek"):
        f.seek(0)
    return size
