"""Uploads for a feature index are refused before they cost: a zip's entries from the sizes it
declares and each image's header (format, pixels against the bound Analyse and Steer use), before
anything is unpacked or decoded; a refused or cancelled build leaves nothing of its own on disk; a
session's new index replaces its previous one on disk. And the session bookkeeping that goes with
it: folder keys that are not Gradio's session hashes, a lost session said so, never the owner's."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
from PIL import Image

from backend.core import sessions
from backend.sae import analysis
from backend.sae.index import INDEX_FILE

HUB = SimpleNamespace(is_hub=True, ids=("owner/vlm", "owner/sae"), summary={}, index_out=None, name="hub")


def png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((h, w, 3), 90, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def png_header(w: int, h: int) -> bytes:
    """A PNG's signature and IHDR chunk for w×h pixels, and a token of data: what a header read sees
    of a 40-megapixel picture, without making one."""
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))  # noqa: E731
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


@pytest.fixture
def build(tmp_path, monkeypatch):
    from components.features.images import Build

    monkeypatch.setenv(sessions.DIR_ENV, str(tmp_path / "sessions"))
    monkeypatch.delenv(sessions.QUOTA_ENV, raising=False)
    images = sessions.folder("k1") / "features" / "images"
    images.mkdir(parents=True)
    return Build(HUB, sessions.Space("k1", "features"), images)


def nothing_written(build) -> bool:
    return not any(build.images.iterdir())


def test_a_zip_bomb_is_refused_before_a_byte_is_unpacked(build, tmp_path):
    """40 MB of zeros named .png, and a real small PNG padded to 40 MB: each zip is about 0.04 MB."""
    from components.features.images import collect_images

    for name, payload in (("zeros.png", b"\0" * (40 * 2**20)), ("padded.png", png(64, 64) + b"\0" * (40 * 2**20))):
        archive = tmp_path / f"{name}.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("ok.png", png(40, 40))
            z.writestr(name, payload)
        assert archive.stat().st_size < 0.5e6
        with pytest.raises(gr.Error, match="could not be read as an image|far more than its pixels"):
            collect_images(HUB, [str(archive)], "", build)
        assert nothing_written(build) and build.made == []


def test_pictures_past_the_bound_are_refused_from_their_headers(build, tmp_path):
    """The index build takes the bound Analyse and Steer use (analysis.MAX_SIDE px a side), read from the
    header: a 40-megapixel PNG is refused without being decoded, as a file or inside a zip."""
    from components.features.images import collect_images

    big = tmp_path / "big.png"
    big.write_bytes(png_header(8000, 5000))
    small = tmp_path / "small.png"
    small.write_bytes(png(40, 30))
    with pytest.raises(gr.Error, match=f"8000×5000 px; at most {analysis.MAX_SIDE} px a side"):
        collect_images(HUB, [str(small), str(big)], "", build)
    archive = tmp_path / "big.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(small, "small.png")
        z.write(big, "big.png")
    with pytest.raises(gr.Error, match=f"at most {analysis.MAX_SIDE} px a side"):
        collect_images(HUB, [str(archive)], "", build)
    assert nothing_written(build)
    with pytest.raises(ValueError, match=f"at most {analysis.MAX_SIDE} px a side"):  # Analyse's and Steer's check
        analysis.model_image(HUB, np.zeros((10, analysis.MAX_SIDE + 1, 3), np.uint8))
    # within the bound: copied, and the folder is this build's to remove if the build is refused
    src = collect_images(HUB, [str(small)], "", build)
    assert len(src) == 1 and build.made == [Path(src.root)]
    build.discard()
    assert nothing_written(build)


def test_refusals_print_no_server_path(build, tmp_path):
    from components.features.images import MAX_TAB_IMAGES, collect_images

    one = tmp_path / "one.png"
    one.write_bytes(png(8, 8))
    with pytest.raises(gr.Error) as e:
        collect_images(HUB, [str(one)] * (MAX_TAB_IMAGES + 1), "", build)
    assert "OUT" in str(e.value) and str(tmp_path) not in str(e.value) and "/tmp" not in str(e.value)


def test_a_new_index_replaces_the_sessions_previous_one(build, tmp_path, monkeypatch):
    from backend.sae import visitor

    idx = build.images.parent / "index"
    for k in ("old", "new"):
        (idx / k).mkdir(parents=True)
        (idx / k / INDEX_FILE).write_bytes(b"x" * 100)
        (build.images / f"images-{k}").mkdir()
        (build.images / f"images-{k}" / "a.png").write_bytes(b"y" * 100)
    src = SimpleNamespace(root=str(build.images / "images-new"))
    monkeypatch.setattr(visitor, "session_source", lambda base, out: f"session:{out}")
    build.installed("own:x", idx / "new" / INDEX_FILE, src)
    assert sorted(p.name for p in idx.iterdir()) == ["new"]
    assert sorted(p.name for p in build.images.iterdir()) == ["images-new"]
    assert sessions.used_bytes("k1") == 200


def test_folder_keys_are_not_session_hashes_and_a_lost_session_says_so(tmp_path, monkeypatch):
    from components.serving import visitor

    monkeypatch.setenv(sessions.DIR_ENV, str(tmp_path / "sessions"))
    monkeypatch.delenv(sessions.SHARED_ENV, raising=False)
    request = SimpleNamespace(session_hash="abc123hash")
    folder = visitor.own_folder(request, "features")
    assert "abc123hash" not in str(folder) and folder.parent.name == sessions.key_of("abc123hash")
    for nobody in (None, SimpleNamespace(session_hash=None)):
        with pytest.raises(gr.Error, match="carries no session"):
            visitor.own_folder(nobody, "features")
    # a session source whose folder was swept: said so, not the shared organism in its place
    from backend.sae import visitor as sv

    index = folder / "index" / INDEX_FILE
    index.parent.mkdir(parents=True)
    index.write_bytes(b"")
    source = sv.session_source("own:x", index)
    assert not sessions.lost(index)
    sessions.end(sessions.key_of("abc123hash"))
    with pytest.raises(sessions.SessionGone, match="Reload the page"):
        sv.organism(source)
