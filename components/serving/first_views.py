"""Each tab's default first view, computed once and kept, so that a tab opens with its result at once.

On the zoo every default first view is the same every time (the models are committed, the inputs
are the tab's defaults), yet a cold one took 8-13 s on a 2-core Space: the model's load and the
method's computation, for every new server. Gradio's own answer is cached examples; here the first
view of each tab (components.common.on_first_open) is kept the same way:

- computed at start-up, in the background, one tab after another in the tabs' order (`warm`), by the
  tab's own first-view function with its defaults, each step under the model's lock as any call;
- kept on disk (`WORKBENCH_FIRST_VIEWS`, default `~/.cache/workbench/first-views`), under a key of the
  app's code and the zoo's manifests, so a restart serves them at once and a changed app or organism
  never serves an old one; files a view hands out (its exports) are kept beside it and handed to each
  visitor as their own copy (components.serving.exports);
- served only when the inputs are the defaults: any changed input computes live, as before. A tab
  opened while its view is being computed waits for that computation instead of starting a second;
  a tab opened before the start-up reached it computes its view for that visitor, and that result
  is kept (`live`). The start-up's thread starts no view while a visitor's is being computed (a
  lower priority of its own would slow the views visitors wait for), and a kept view is answered
  without waiting at the model gate (components.serving.guard.gated), where the start-up's loads of
  other tabs' models held it back.

Only for the zoo (`source == "zoo"`): the papers' checkpoints are not the same on every Space, and
under ZeroGPU a computation belongs in a visitor's call. The views are a cache of deterministic
results: a cached view is the view a live computation draws, so nothing on the page marks it.
Off with WORKBENCH_FIRST_VIEWS=off.

The store holds JSON and .npy files (`_encode`): text, numbers, plotly figures, tables, arrays and
pictures as the tab returned them, read back without pickle (the app never unpickles). A view
holding anything else (a component update object) is kept in memory only.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

log = logging.getLogger("workbench.first_views")
ENV = "WORKBENCH_FIRST_VIEWS"
WAIT_S = 60.0  # a first view being computed is waited for at most this long, then computed live
ROOT = Path(__file__).resolve().parents[2]  # the repository: components/serving/first_views.py


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() not in ("0", "off", "no", "false")


def store_dir() -> Path:
    raw = os.environ.get(ENV, "").strip()
    if raw and raw.lower() not in ("1", "on", "yes", "true"):
        return Path(raw).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "workbench" / "first-views"


def code_key() -> str:
    """The app's code and the zoo's manifests: a view computed by other code or other weights is
    another view."""
    h = hashlib.sha256()
    for folder, pattern in (("components", "*.py"), ("backend", "*.py"), ("assets/zoo", "manifest.json")):
        for p in sorted((ROOT / folder).rglob(pattern)):
            h.update(str(p.relative_to(ROOT)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _norm(x):
    """Inputs as Gradio hands them to a handler and as the components hold them at build compare
    equal (5 and 5.0, a tuple and a list, numpy scalars)."""
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):
        x = x.tolist()
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, (list, tuple)):
        return [_norm(v) for v in x]
    if isinstance(x, dict):
        return {k: _norm(v) for k, v in x.items()}
    return x


@dataclass
class _View:
    tab: str
    fn: Callable
    defaults: list
    steps: list | None = None  # the outputs the function gave, step by step (one step if plain)
    computing: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


_VIEWS: dict[str, _View] = {}
_KEY: list[str] = []  # the code key, once
_CLAIM = threading.Lock()  # who computes a view: the start-up's thread or the first visitor to open it
_BUSY = threading.Condition()
_VISITORS = [0]  # visitors' first views being computed now: the start-up's thread waits for them


def register(tab: str, fn: Callable, defaults: list) -> None:
    """A tab's first-view function and its inputs' default values (at build time)."""
    _VIEWS[tab] = _View(tab, fn, [_norm(v) for v in defaults])


def _path(tab: str) -> Path:
    if not _KEY:
        _KEY.append(code_key())
    return store_dir() / _KEY[0] / tab


def _is_file(x) -> bool:
    return isinstance(x, str) and len(x) < 4096 and os.path.isabs(x) and os.path.isfile(x)


def _map(x, leaf: Callable[[Any], Any]):
    """`x` with `leaf` applied to everything inside its tuples, lists and dicts (their shape kept:
    Gradio reads a handler's outputs by it)."""
    if isinstance(x, tuple):
        return tuple(_map(v, leaf) for v in x)
    if isinstance(x, list):
        return [_map(v, leaf) for v in x]
    if isinstance(x, dict):
        return {k: _map(v, leaf) for k, v in x.items()}
    return leaf(x)


def _keep_files(steps: list, folder: Path) -> list:
    """The steps with every file path among their outputs replaced by a copy kept in `folder`."""
    kept = folder / "files"

    def keep(x):
        if not _is_file(x):
            return x
        target = kept / hashlib.sha256(x.encode()).hexdigest()[:16] / Path(x).name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(x, target)
        return str(target)

    return _map(steps, keep)


def _save(view: _View) -> None:
    folder = _path(view.tab)
    staging = folder.with_name(f".{view.tab}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        steps = _keep_files(view.steps, staging)
        # the kept files' paths name the staging folder until it becomes the view's
        steps = _rename(steps, str(staging), str(folder))
        arrays = staging / "arrays"
        (staging / "view.json").write_text(
            json.dumps({"defaults": _encode(view.defaults, arrays), "steps": _encode(steps, arrays)})
        )
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(staging, folder)
    view.steps = steps  # the kept files from now on: the computation's own may be removed


def _rename(steps, old: str, new: str):
    return _map(steps, lambda x: new + x[len(old) :] if isinstance(x, str) and x.startswith(old + os.sep) else x)


class Unkeepable(TypeError):
    """An output the store has no safe format for: the view stays in memory only."""


def _encode(x, arrays: Path):
    """`x` as JSON, its arrays and pictures as files in `arrays`; tagged so that `_decode` gives back
    the same types (a tuple stays a tuple: Gradio reads a handler's outputs by it)."""
    import numpy as np

    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (list, tuple)):
        return {"__t": "tuple" if isinstance(x, tuple) else "list", "v": [_encode(v, arrays) for v in x]}
    if isinstance(x, dict):
        return {"__t": "dict", "v": [[_encode(k, arrays), _encode(v, arrays)] for k, v in x.items()]}
    arrays.mkdir(parents=True, exist_ok=True)
    name = f"{len(list(arrays.iterdir()))}"
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            raise Unkeepable("an array of objects")
        np.save(arrays / f"{name}.npy", x, allow_pickle=False)
        return {"__t": "npy", "f": f"{name}.npy"}
    kind = type(x).__module__.split(".")[0]
    if kind == "gradio" and _component_args(x) is not None:  # an update: gr.Number(maximum=…)
        return {
            "__t": "component",
            "cls": f"{type(x).__module__}:{type(x).__qualname__}",
            "v": _encode(_component_args(x), arrays),
        }
    if kind == "plotly":
        return {"__t": "plotly", "v": x.to_json()}
    if kind == "pandas" and hasattr(x, "to_json"):
        return {"__t": "frame", "v": x.to_json(orient="table", index=False)}
    if kind == "PIL":
        x.save(arrays / f"{name}.png")
        return {"__t": "png", "f": f"{name}.png"}
    raise Unkeepable(type(x).__name__)


def _component_args(x) -> dict | None:
    """The arguments a handler built a Gradio component update with (Gradio keeps them)."""
    args = getattr(x, "_constructor_args", None)
    return dict(args[0]) if isinstance(args, list) and args and isinstance(args[0], dict) else None


def _component(name: str, kwargs: dict):
    """A Gradio component update rebuilt from its class's name (Gradio's own classes only)."""
    import importlib

    import gradio as gr

    module, _, qualname = name.partition(":")
    cls = getattr(importlib.import_module(module), qualname, None) if module.startswith("gradio.") else None
    if not (isinstance(cls, type) and issubclass(cls, gr.components.Component)):
        raise ValueError(f"not a Gradio component: {name!r}")
    return cls(**kwargs)


def _decode(x, arrays: Path):
    if not isinstance(x, dict):
        return x
    t, v = x["__t"], x.get("v")
    if t in ("list", "tuple"):
        out = [_decode(i, arrays) for i in v]
        return tuple(out) if t == "tuple" else out
    if t == "dict":
        return {_decode(k, arrays): _decode(val, arrays) for k, val in v}
    if t == "npy":
        import numpy as np

        return np.load(arrays / x["f"], allow_pickle=False)
    if t == "plotly":
        import plotly.io

        return plotly.io.from_json(v)
    if t == "frame":
        import pandas as pd

        return pd.read_json(io.StringIO(v), orient="table")
    if t == "component":
        return _component(x["cls"], _decode(v, arrays))
    if t == "png":
        from PIL import Image

        with Image.open(arrays / x["f"]) as im:
            return im.copy()
    raise ValueError(f"unknown kept type {t!r}")


def _load(view: _View) -> bool:
    folder = _path(view.tab)
    try:
        data = json.loads((folder / "view.json").read_text())
        if _decode(data["defaults"], folder / "arrays") != view.defaults:
            return False
        view.steps = _decode(data["steps"], folder / "arrays")
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True


def _claim(view: _View) -> bool:
    with _CLAIM:
        if view.computing.is_set() or view.done.is_set():
            return False
        view.computing.set()
        return True


def _keep(view: _View) -> None:
    """Write a computed view to the store (in memory only where it holds what the store cannot)."""
    try:
        _save(view)
    except Unkeepable as e:  # kept in memory all the same
        log.info("first view of %s kept in memory only (%s)", view.tab, e)
    except OSError:
        log.warning("first view of %s not written to %s", view.tab, store_dir(), exc_info=True)


@contextmanager
def live(tab: str, args: tuple) -> Iterator[Callable[[list], None]]:
    """A visitor's first view computed now (none kept for these inputs yet). While it runs the
    start-up's thread starts no other view: opened in the first seconds after a start, a tab's view
    waited behind the loads and computations of the tabs before it. Where the inputs are the
    defaults and nobody computes that view yet, the visitor's result becomes the kept view: call the
    yielded `keep(steps)` with the outputs, step by step; a failed computation leaves it unclaimed."""
    view = _VIEWS.get(tab)
    mine = view is not None and enabled() and [_norm(a) for a in args] == view.defaults and _claim(view)
    kept = []

    def keep(steps: list) -> None:
        kept.append(list(steps))

    with _BUSY:
        _VISITORS[0] += 1
    try:
        yield keep
    finally:
        with _BUSY:
            _VISITORS[0] -= 1
            _BUSY.notify_all()
        if mine and view is not None:
            if kept:
                view.steps = kept[0]
                _keep(view)
                view.done.set()
                log.info("first view of %s ready (computed for its first visitor)", tab)
            else:
                view.computing.clear()


def _no_visitor_computing(limit_s: float = 120.0) -> None:
    with _BUSY:
        _BUSY.wait_for(lambda: _VISITORS[0] == 0, timeout=limit_s)


def _compute(view: _View) -> None:
    """The tab's own first view with its defaults: never beside a model load, no model it uses
    evicted meanwhile (as in a visitor's call)."""
    from backend.core import loadgate
    from backend.core.store import request_scope

    with loadgate.computing(), request_scope():
        out = view.fn(*view.defaults)
        view.steps = list(out) if hasattr(out, "__next__") else [out]


def _load_ahead(view: _View) -> bool:
    """Whether the store holds this view (read back in milliseconds, no model: no need to wait)."""
    return (_path(view.tab) / "view.json").is_file()


def warm(tabs: list[str] | None = None) -> threading.Thread | None:
    """Compute (or read back) every registered first view in the background, in the tabs' order."""
    if not enabled() or not _VIEWS:
        return None

    def run():
        for tab in tabs or list(_VIEWS):
            view = _VIEWS.get(tab)
            if view is None:
                continue
            if not _load_ahead(view):
                _no_visitor_computing()
            if not _claim(view):  # done, or a visitor computes it now
                continue
            try:
                if not _load(view):
                    _compute(view)
                    _keep(view)
                log.info("first view of %s ready", tab)
            except Exception:  # noqa: BLE001 - a view that cannot be computed is computed live
                log.warning("first view of %s not computed ahead", tab, exc_info=True)
                view.steps = None
            finally:
                view.done.set()

    t = threading.Thread(target=run, name="workbench-first-views", daemon=True)
    t.start()
    return t


def ready(tab: str, args: tuple) -> bool:
    """Whether `tab`'s first view for these inputs is kept and computed (served without waiting)."""
    view = _VIEWS.get(tab)
    return (
        view is not None
        and enabled()
        and view.done.is_set()
        and view.steps is not None
        and [_norm(a) for a in args] == view.defaults
    )


def served(tab: str, args: tuple) -> list | None:
    """The kept steps of `tab`'s first view for these inputs, each file handed to this visitor as
    their own copy; None where the inputs are not the defaults or no view is kept (compute live)."""
    view = _VIEWS.get(tab)
    if view is None or not enabled() or [_norm(a) for a in args] != view.defaults:
        return None
    deadline = time.monotonic() + WAIT_S
    # being computed (at the start, or for another visitor): waited for, unless that computation fails
    while view.computing.is_set() and not view.done.wait(0.2) and time.monotonic() < deadline:
        pass
    if not view.done.is_set() or view.steps is None:
        return None
    from components.serving import exports

    def hand(x: Any):
        if _is_file(x):
            return exports.served(x)
        if type(x).__module__.startswith("gradio.") and (args := _component_args(x)) is not None:
            return type(x)(**args)  # each visitor's answer its own update object
        return x

    try:
        return _map(list(view.steps), hand)
    except OSError:  # a kept file went missing: compute live
        return None
