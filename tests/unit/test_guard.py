import asyncio
import re

import gradio as gr
import pytest

import app
import components
from backend.core.presets import PresetError
from components.serving import guard


def _run_all(fn, *args):
    """Drive a wrapped handler of any kind to completion."""
    if guard.inspect.isasyncgenfunction(fn):

        async def drain():
            return [x async for x in fn(*args)]

        return asyncio.run(drain())
    if guard.inspect.isgeneratorfunction(fn):
        return list(fn(*args))
    if guard.inspect.iscoroutinefunction(fn):
        return asyncio.run(fn(*args))
    return fn(*args)


def make_handlers(exc):
    def plain(x):
        raise exc

    def gen(x):
        yield 1
        raise exc

    async def coro(x):
        raise exc

    async def agen(x):
        yield 1
        raise exc

    return [plain, gen, coro, agen]


@pytest.mark.parametrize("kind", range(4))
@pytest.mark.parametrize(
    "exc,expected",
    [
        (ValueError("rank must be positive"), "rank must be positive"),
        (KeyError("no feature 99999"), "no feature 99999"),
        (IndexError("channel out of range"), "channel out of range"),
        (PresetError("not a valid hub id"), "not a valid hub id"),
        (gr.Error("already clear"), "already clear"),
    ],
)
def test_input_errors_become_clear_messages(kind, exc, expected):
    before = len(guard.INTERNAL_ERRORS)
    fn = guard.guarded(make_handlers(exc)[kind])
    with pytest.raises(gr.Error) as info:
        _run_all(fn, 0)
    assert expected in str(info.value.message)
    assert len(guard.INTERNAL_ERRORS) == before
    # a refused input is one log line (the guard's), not Gradio's traceback
    assert info.value.print_exception is False


@pytest.mark.parametrize("kind", range(4))
def test_defects_are_counted_and_hidden(kind):
    before = len(guard.INTERNAL_ERRORS)
    fn = guard.guarded(make_handlers(RuntimeError("secret internal detail"))[kind])
    with pytest.raises(gr.Error) as info:
        _run_all(fn, 0)
    assert "Internal error (RuntimeError)" in info.value.message
    assert "secret" not in info.value.message
    assert info.value.print_exception is True  # a defect keeps its traceback in the log
    assert len(guard.INTERNAL_ERRORS) == before + 1
    guard.INTERNAL_ERRORS.pop()


def test_wrappers_keep_kind_and_results():
    def plain(x):
        return x + 1

    def gen(x):
        yield x
        yield x + 1

    assert guard.guarded(plain)(1) == 2
    assert guard.inspect.isgeneratorfunction(guard.guarded(gen))
    assert list(guard.guarded(gen)(1)) == [1, 2]


def _called_to_the_end(fn, args):
    out = fn(*args)
    if guard.inspect.isgenerator(out):
        return list(out)
    if guard.inspect.iscoroutine(out):
        return asyncio.run(out)
    if guard.inspect.isasyncgen(out):

        async def drain():
            return [x async for x in out]

        return asyncio.run(drain())
    return out


def test_every_event_of_the_app_is_guarded(caplog):
    """What Gradio calls for each event, made to fail (300 arguments: a TypeError inside the handler),
    fails as the guard makes it fail: a short gr.Error naming the handler, the defect counted once in
    INTERNAL_ERRORS and logged with its traceback; never the bare TypeError. A handler that takes
    *args accepts the call: it must still end without a bare exception."""
    demo = app.build_app("zoo")
    fns = [f for f in demo.fns.values() if f.fn is not None]
    before = list(guard.INTERNAL_ERRORS)
    refused, any_args = 0, []
    caplog.set_level("ERROR", logger="workbench")
    try:
        for f in fns:
            inner = guard.inspect.unwrap(f.fn)
            takes_any = any(p.kind is p.VAR_POSITIONAL for p in guard.inspect.signature(inner).parameters.values())
            counted = len(guard.INTERNAL_ERRORS)
            if takes_any:
                any_args.append(f.api_name)
            try:
                _called_to_the_end(f.fn, [object()] * 300)
            except gr.Error as e:
                if takes_any:
                    continue
                assert e.message.startswith(f"Internal error (TypeError) while running {inner.__qualname__};"), (
                    f.api_name,
                    e.message,
                )
                assert e.print_exception is True, f.api_name
                added = guard.INTERNAL_ERRORS[counted:]
                assert len(added) == 1 and added[0].startswith(f"{inner.__qualname__}: TypeError: "), (
                    f.api_name,
                    added,
                )
                refused += 1
                continue
            assert takes_any, f"{f.api_name} ran with 300 arguments"
        counted = len(guard.INTERNAL_ERRORS) - len(before)
    finally:
        guard.INTERNAL_ERRORS[:] = before
    # the app's handlers take their inputs by name: only the tabs' first views (components.common.
    # on_first_open) and the links' setters take *args, which this probe cannot make fail
    assert refused > 0 and all(re.fullmatch(r"(first|make)(_\d+)?", n) for n in any_args), any_args
    logged = [r for r in caplog.records if r.getMessage().startswith("internal error in ")]
    assert len(logged) == counted >= refused and all(r.exc_info for r in logged)


def test_model_handlers_carry_the_outermost_zerogpu_mark():
    """Under ZeroGPU the outermost marked call is pickled into a GPU worker: it must be the handler
    (UI values as arguments), so every model-touching event's handler is marked, keeps its kind
    (generators stay generators for Gradio's streaming) and its signature (Gradio injects Progress and
    Request by parameter), and asks for a tab's duration; the other events are not marked."""
    from backend.core.zerogpu import MAX_DURATION, estimate, is_marked
    from components.common import is_model_group

    demo = app.build_app("zoo")
    fns = [f for f in demo.fns.values() if f.fn is not None]
    model = [f for f in fns if is_model_group(f.concurrency_id)]
    other = [f for f in fns if not is_model_group(f.concurrency_id)]
    # a handler whose work must outlive the call (a visitor's own math set, the Features tab's own
    # VLM + SAE loaded for every later worker; "load_own": a deep link's run of it) runs in the main process
    main = [f.api_name for f in model if getattr(f.fn, "main_only", False)]
    assert set(main) == {
        "mn_math",
        "mn_math_dataset",
        "mn_nonmath",
        "mn_nonmath_dataset",
        "features_load",
        "load_own",
    }, main
    assert not any(getattr(f.fn, "gpu_marked", False) for f in model if f.api_name in main)
    model = [f for f in model if f.api_name not in main]
    assert len(model) >= 20 and other
    for f in model:
        assert is_marked(f.fn), f.api_name
        inner = guard.inspect.unwrap(f.fn)
        assert guard.inspect.isgeneratorfunction(f.fn) == guard.inspect.isgeneratorfunction(inner), f.api_name
        assert guard.inspect.signature(f.fn) == guard.inspect.signature(inner), f.api_name
        assert 10 <= estimate(f.fn) <= MAX_DURATION
    assert not any(getattr(f.fn, "gpu_marked", False) for f in other)
    # a tab split into panel modules (components/features/*.py) keeps its handlers: its ZeroGPU
    # seconds, its visitor's turns and its model pick loaded ahead
    from components import tab_by_id

    tabs = {guard.handler_tab(f.fn) for f in model}
    assert {"relevance", "features", "memorization", "math_neurons", "adapters"} <= tabs, tabs
    assert all(tab_by_id(t) is not None for t in tabs), tabs
    assert (
        guard.handler_gpu_seconds(next(f.fn for f in model if guard.handler_tab(f.fn) == "memorization"))
        == MAX_DURATION
    )


def test_a_model_events_pick_is_found_among_its_arguments_as_gradio_passes_them():
    """Under ZeroGPU the main process loads a user's own model from the call's model pick before the
    worker forks (backend.core.preload.own): it takes the argument the picker's box fills, counting
    the ones Gradio inserts by parameter (gr.Request, gr.Progress, event data), and nothing else."""
    from components.common import is_model_group
    from components.inputs.model_picker import model_picker

    def after_request(request: gr.Request, text, model):
        return text

    def after_event(text, evt: gr.SelectData, model, progress=gr.Progress()):
        return text

    def no_pick(text, other):
        return text

    with gr.Blocks() as demo:
        box, _ = model_picker([], "adapters", elem_id="pick")
        text = gr.Textbox()
        for fn, inputs in ((after_request, [text, box]), (after_event, [text, box]), (no_pick, [text, text])):
            gr.Button().click(fn, inputs, text, api_name=fn.__name__)
    where = {
        f.api_name: guard.pick_position(f)
        for f in demo.fns.values()
        if f.api_name in ("after_request", "after_event", "no_pick")
    }
    assert where == {"after_request": ("adapters", 2), "after_event": ("adapters", 2), "no_pick": None}

    from backend.core import preload

    demo = app.build_app("zoo")
    picks = {}
    for f in demo.fns.values():
        if (
            f.fn is None
            or not is_model_group(f.concurrency_id)
            or not any(getattr(c, "wb_pick_tab", None) for c in f.inputs)
        ):
            continue
        tab, at = guard.pick_position(f)
        params = list(guard.inspect.signature(f.fn).parameters.values())
        name = params[at].name if at < len(params) else params[-1].name  # past the last: its *args
        assert name in ("model", "model_id", "key", "vlm", "source", "args"), (f.api_name, name)
        picks.setdefault(tab, []).append(f.api_name)
    papers = {t.id for t in components.tabs() if t.paper}
    assert set(picks) == papers, picks
    # the Features tab's pick is its session's source: its own VLM comes with its own SAE
    assert {"analyse_image", "steer", "build_index", "ask_model"} <= set(picks["features"]), picks
    assert set(preload._PICKS) == papers


def test_a_model_calls_limit_counts_its_wait_at_the_load_gate(monkeypatch):
    """The job limit started inside the handler, after its wait at the load gate: a call that
    waited 2.8 s behind another request's load then ran its full limit (an 8-seed generation ended
    17.8 s after it started, limit 15 s). Now the limit counts from the gated call's start."""
    from backend.core import limits, loadgate
    from tests.helpers.elsewhere import held_elsewhere

    monkeypatch.setattr(guard, "JOB_SECONDS", 2.0)
    with held_elsewhere(loadgate.loading, release_after_s=0.5):
        left = guard.gated(guard.guarded(lambda: limits.remaining()))()
    assert left is not None and left < 1.6, left  # 2 s less the 0.5 s wait
