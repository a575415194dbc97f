"""The files a call hands to the browser or to an API client: an explanation's JSON and PNG, a
feature page's, NeMo's, Math neurons' and Adapters' exports, the per-sentence CSV, the session
report, an MCP tool's picture.

    paths = exports.hand_out(lambda folder: write_files_into(folder), request)

Two rules meet here. What a call writes for a visitor is the visitor's (backend.core.sessions): it
is written in the visitor's own space, SPACE, never in a folder of the temp directory nobody
removes. And Gradio serves a file only from its own cache folder: a returned path elsewhere it
copies there first, but only from the temp folder, the working directory or `allowed_paths`, and
refuses anything else (InvalidPathError: a download that never comes, a Report button left
waiting). A Space's owner may put the session folders anywhere (WORKBENCH_SESSION_DIR on persistent
storage), and `allowed_paths` must not name them (every visitor's files would be one guessed URL
away). So the call's files are copied here into Gradio's cache, under a name no one can derive
(a keyed hash of the content and the session), and the visitor's own copy goes at once: nothing
accumulates with the number of calls.

The copies in Gradio's cache go with the session too: when it ends (Gradio's unload, or the sweep
after WORKBENCH_SESSION_TTL) the `on_end` listener removes every copy named for it; Gradio's own
`delete_cache` (app.py: the same time limit) removes the rest. A call with no session (a raw POST,
Python calling a handler, shared builds, a ZeroGPU worker where Gradio's request is not at hand)
writes in a temp folder removed before it returns, and its copy is Gradio's alone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from backend.core import sessions

from components.serving.visitor import space

SPACE = "exports"  # the exports' place in a session's folder (backend.core.sessions.Space)
PREFIX = "wb-"  # Gradio's cache holds folders of its own beside these
NOBODY = object()  # in place of a request: the files of no session (e.g. MCP agents, who share one)


def current_request():
    """The request being served, where Gradio's context has it (not in a ZeroGPU worker)."""
    try:
        from gradio.context import LocalContext

        return LocalContext.request.get(None)
    except (ImportError, LookupError):
        return None


def cache_root() -> Path:
    """Gradio's cache folder (GRADIO_TEMP_DIR), read at each call as Gradio reads it."""
    from gradio.utils import get_upload_folder

    return Path(get_upload_folder())


def _space(request, name: str = SPACE) -> sessions.Space:
    try:
        return space(request, name)
    except ValueError:  # a request whose session id is no usable folder name: nobody's
        return sessions.Space(None, name)


@contextmanager
def folder(request=None, name: str = SPACE) -> Iterator[Path]:
    """A fresh folder for one call's files, in the visitor's space `name` (SPACE, or a method's own;
    no session: a temp folder), removed when the block ends: hand its files out with `served` inside
    the block."""
    request = request if request is not None else current_request()
    made = _space(request, name).make(uuid.uuid4().hex) or Path(tempfile.mkdtemp(prefix="wb-export-"))
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def served(path: str | os.PathLike, request=None) -> str:
    """A copy of `path` in Gradio's cache (Gradio serves it as it is, wherever `path` was), named for
    the request's session so that the session's end removes it."""
    request = request if request is not None else current_request()
    path = Path(path)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            h.update(chunk)
    sid = _space(request).session
    # keyed (key_of): knowing a file's content, or a session's other files, gives no copy's name
    name = sessions.key_of(f"{sid}:{h.hexdigest()}:{path.name}")
    target = cache_root() / f"{PREFIX}{sid or 'none'}-{name}" / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        try:  # handed out again: Gradio's delete_cache ages a file from its last change
            os.utime(target)
            return str(target)
        except FileNotFoundError:  # removed meanwhile (the session ended): written again below
            target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    shutil.copyfile(path, staging)
    os.replace(staging, target)  # a concurrent request never serves a half-written copy
    return str(target)


def hand_out(write: Callable[[Path], Any], request=None, name: str = SPACE) -> Any:
    """`write(folder)` writes one call's files in a fresh folder (`folder`, in the space `name`) and
    returns their paths, one or a list or tuple of them (None stays None); returned: the same shape
    of paths Gradio serves (`served`). Nothing of the call stays in the visitor's folder or the temp
    folder."""
    request = request if request is not None else current_request()
    with folder(request, name) as d:
        try:
            out = write(d)
            if isinstance(out, (list, tuple)):
                return type(out)(None if p is None else served(p, request) for p in out)
            return None if out is None else served(out, request)
        except FileNotFoundError:
            if d.is_dir():
                raise
            # The session ended while its call still wrote (a page closed as a race finished): its
            # folder went with it, and nobody is left to take the files. Said, not an internal error.
            import gradio as gr

            raise gr.Error(
                "This session ended before its files were written; nothing was kept.", print_exception=False
            ) from None


def drop_others(request, pattern: str, keep: str | os.PathLike) -> None:
    """Remove the request's session's other copies of files named like `pattern` (a glob), keeping
    `keep` (one report per session at a time). A call with no session has no copies of its own."""
    sid = _space(request if request is not None else current_request()).session
    if sid is None:
        return
    keep = Path(keep).parent
    for d in copies_of(sid):
        if d != keep and any(d.glob(pattern)):
            shutil.rmtree(d, ignore_errors=True)


def copies_of(session: str) -> list[Path]:
    """The copies in Gradio's cache named for `session` (a session key)."""
    root = cache_root()
    if not root.is_dir():
        return []
    return [p for p in root.glob(f"{PREFIX}{sessions.session_id(session)}-*") if p.is_dir()]


@sessions.on_end
def _drop_copies(session: str, _folder: Path) -> None:
    for d in copies_of(session):
        shutil.rmtree(d, ignore_errors=True)
