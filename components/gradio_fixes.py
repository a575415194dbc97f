"""Workarounds for Gradio behaviour that the workbench cannot accept, applied once by app.py."""
from __future__ import annotations

import html
import os
import uuid
from pathlib import Path

from gradio import processing_utils


def atomic_image_cache() -> None:
    """Gradio 6.31 writes a returned image to its content-addressed cache path in place
    (`save_pil_to_cache`), so when two requests produce the same image at the same moment one of
    them can be served a half-written, even empty, file (seen under 16 parallel clients). Write to
    a temporary name and rename into place, and keep a file that is already there, as Gradio
    already does for returned files (`save_file_to_cache`)."""
    if getattr(processing_utils.save_pil_to_cache, "_wb_atomic", False):
        return

    def save_pil_to_cache(img, cache_dir: str, name: str = "image", format: str = "webp") -> str:
        data = processing_utils.encode_pil_to_bytes(img, format)
        folder = Path(cache_dir) / processing_utils.hash_bytes(data)
        folder.mkdir(exist_ok=True, parents=True)
        path = (folder / f"{name}.{format}").resolve()
        if not path.exists():
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return str(path)

    save_pil_to_cache._wb_atomic = True
    processing_utils.save_pil_to_cache = save_pil_to_cache


def escaped_error_messages() -> None:
    """Gradio 6.31 renders an error toast's message as HTML, so a message that names a nested
    handler ("build.<locals>.run") or quotes a user's "<text>" loses everything after the "<".
    Error messages leave the server HTML-escaped (quotes kept), and the toast shows them verbatim."""
    from gradio import queueing, utils

    if getattr(utils.error_payload, "_wb_escaped", False):
        return
    plain = utils.error_payload

    def error_payload(error, show_error):
        content = plain(error, show_error)
        if isinstance(content.get("error"), str):
            content["error"] = html.escape(content["error"], quote=False)
        return content

    error_payload._wb_escaped = True
    utils.error_payload = queueing.error_payload = error_payload
