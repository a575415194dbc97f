"""ZeroGPU's forked workers and the main process: notes shown from main, models loaded in main before a fork."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.unit.test_zerogpu_process import stand_in_spaces


@pytest.fixture(scope="module")
def spaces():
    yield from stand_in_spaces()


@pytest.fixture
def under_zerogpu(spaces, monkeypatch):
    """`backend.core.zerogpu.gpu` as on a ZeroGPU Space: every outermost marked call in a forked worker."""
    from backend.core import spaces_pkg
    from components import tabs

    # Every tab's modules are imported before the stand-in is in place: a module imported under it
    # would keep its functions marked for forked workers after this test, and a later test in this
    # process would send a bench's locks across a pickle boundary.
    tabs()
    monkeypatch.setattr(spaces_pkg, "spaces", spaces)
    return spaces


def guarded_model_handler(fn):
    """`fn` as the app serves it: a model event of a Blocks, through components.serving.guard.guard_events."""
    import gradio as gr

    from components.serving import guard
    from components.common import model_event

    with gr.Blocks() as demo:
        box = gr.Textbox()
        gr.Button().click(fn, box, box, **model_event())
    guard.guard_events(demo)
    (block_fn,) = [f for f in demo.fns.values() if f.fn is not None and guard.inspect.unwrap(f.fn) is fn]
    return block_fn.fn


def tiny_model():
    torch.manual_seed(0)
    return torch.nn.Linear(64, 64)


def test_a_note_raised_in_a_worker_reaches_the_page_from_the_main_process(under_zerogpu, monkeypatch):
    """A model over the store's budget is kept alone with a note for the user: raised in a worker, it
    travels back with the result and is shown by the main process (a worker's toast reaches no page)."""
    from backend.core import store
    from backend.core.zerogpu import in_main
    from components.serving import guard

    shown = []
    monkeypatch.setattr(guard.gr, "Warning", lambda note, *a, **k: shown.append((note, in_main())))
    monkeypatch.setenv("WORKBENCH_MODEL_BUDGET", "1000")

    def analyse(text):
        store.get_or_load("hub:owner/too-large@main|Linear", tiny_model)
        return f"{text} in main: {in_main()}"

    handler = guarded_model_handler(analyse)
    assert handler("x") == "x in main: False"  # it ran in a worker
    assert len(shown) == 1 and "is larger than the model budget" in shown[0][0] and shown[0][1] is True
    assert "hub:owner/too-large@main|Linear" not in store.loaded()  # not registered: not mirrored


def test_what_a_worker_had_to_load_is_loaded_in_main_for_the_next_worker(under_zerogpu, monkeypatch):
    from backend.core import preload, store, weights
    from backend.core import presets as P

    preset = P.Preset("relevance", "hub", "owner/mirrored", "torch.nn.Linear")
    monkeypatch.setattr(P, "_REGISTRY", {"relevance": [preset]})
    monkeypatch.setattr(preload, "_LOADERS", {"relevance": lambda p: store.get_or_load(weights.key(p), tiny_model)})
    monkeypatch.setattr(preload, "_MIRRORED", [])

    def use(text):
        before = store.load_count()
        preload._LOADERS["relevance"](preset)
        return f"{store.load_count() - before}"

    handler = guarded_model_handler(use)
    try:
        assert handler("a") == "1"  # neither preloaded nor loaded yet: the worker had to load it
        assert weights.key(preset) in store.loaded() and preload.mirrored() == ["relevance:owner/mirrored"]
        assert handler("b") == "0"  # the next worker inherits it from the main process
    finally:
        store.evict(weights.key(preset))


def test_a_worker_waits_for_a_load_in_progress_in_main_instead_of_loading_again(under_zerogpu, monkeypatch):
    """A fork taken mid-load would copy the held load lock (a worker stuck forever) or load again."""
    import threading

    from backend.core import store

    key = "hub:owner/slow@main|Linear"
    started, release, waiting = threading.Event(), threading.Event(), threading.Event()

    def slow():
        started.set()
        assert release.wait(30)  # the load goes on until the call waits for it
        return tiny_model()

    def use(text):
        before = store.load_count()
        store.get_or_load(key, tiny_model)
        return f"{store.load_count() - before}"

    real_wait = store.wait_for_loads

    def wait_for_loads():  # the call, in the main process, before its worker forks
        waiting.set()
        real_wait()

    monkeypatch.setattr(store, "wait_for_loads", wait_for_loads)  # read when the handler is marked
    handler = guarded_model_handler(use)
    loading = threading.Thread(target=store.get_or_load, args=(key, slow), daemon=True)
    loading.start()
    assert started.wait(10)
    answer = []
    call = threading.Thread(target=lambda: answer.append(handler("x")), daemon=True)
    try:
        call.start()
        assert waiting.wait(30) and answer == []  # the call waits while the load is in progress
        release.set()
        call.join(60)
        assert answer == ["0"], "the worker did not inherit the model loaded in main"
    finally:
        release.set()
        loading.join(10)
        store.evict(key)


def test_the_checkpoint_a_call_names_is_loaded_in_main_before_its_worker_forks(under_zerogpu, monkeypatch):
    """A registered checkpoint picked in the tab (not preloaded, or evicted since) loads in the main
    process first, so not even the first worker reads its weights."""
    from backend.core import preload, store, weights
    from backend.core import presets as P

    tab = __name__.rpartition(".")[2]  # the tab a handler belongs to is its module's (components.serving.guard)
    preset = P.Preset(tab, "hub", "owner/picked", "torch.nn.Linear")
    monkeypatch.setattr(P, "_REGISTRY", {tab: [preset]})
    monkeypatch.setattr(preload, "_LOADERS", {tab: lambda p: store.get_or_load(weights.key(p), tiny_model)})

    def use(model):
        before = store.load_count()
        preload._LOADERS[tab](P.Preset(tab, "hub", model, "torch.nn.Linear"))
        return f"{store.load_count() - before}"

    handler = guarded_model_handler(use)
    try:
        assert handler("owner/picked") == "0"
        assert weights.key(preset) in store.loaded()
    finally:
        store.evict(weights.key(preset))


@pytest.fixture
def own_qwen2(tmp_path, monkeypatch):
    """A user's own model (a Qwen2 folder saved as a user saves one) under an allowed root."""
    from backend.core import picker
    from tests.helpers.standins import build_local, lms

    root = build_local(tmp_path / "own-models", {"own-qwen2": lms.LOCAL["own-qwen2"]})
    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(root))
    picker.forget()
    yield str(root / "own-qwen2")
    picker.forget()


def picked_model_handler(fn, tab: str, listed):
    """`fn(model, text)` served as the app serves a tab's model event: its first input is the tab's
    model picker (components.inputs.model_picker), its second a text box."""
    import gradio as gr

    from components.serving import guard
    from components.inputs.model_picker import model_picker

    with gr.Blocks() as demo:
        box, _ = model_picker(listed, tab, elem_id="own-model")
        text = gr.Textbox()
        gr.Button().click(fn, [box, text], text, **model_event())
    guard.guard_events(demo)
    (block_fn,) = [f for f in demo.fns.values() if f.fn is not None and guard.inspect.unwrap(f.fn) is fn]
    return block_fn.fn


def model_event():
    from components.common import model_event as event

    return event()


def test_a_users_own_model_is_loaded_in_main_before_the_worker_forks(under_zerogpu, own_qwen2, monkeypatch):
    """The folder a call's model pick names loads in the main process with the tab's own check and
    loader, so neither the first worker nor the next reads its weights; the call's other strings
    are never taken for models."""
    from backend.core import modelcheck, preload, store, weights
    from backend.pissa import service

    checked = []
    real_check = modelcheck.check_model
    monkeypatch.setattr(modelcheck, "check_model", lambda s, method: checked.append(s) or real_check(s, method))
    monkeypatch.setattr(preload, "_MIRRORED", [])

    def use(model, text):
        before = store.load_count()
        service.get_model(model)
        return f"{store.load_count() - before} {text}"

    handler = picked_model_handler(use, "adapters", service.listed())
    key = weights.key(service.pick(own_qwen2).preset)
    checked.clear()
    before = store.load_count()
    try:
        assert handler(own_qwen2, "owner/sentence like text") == "0 owner/sentence like text"
        assert key in store.loaded() and store.loads_since(before) == [key]  # loaded once, in main
        assert handler(own_qwen2, "again") == "0 again"  # the next worker inherits it too
        assert store.loads_since(before) == [key] and preload.mirrored() == []
        assert checked == []  # the check made for the pick above is reused; the text is never checked
    finally:
        store.evict(key)


def test_an_own_model_a_worker_loaded_is_loaded_in_main_for_the_next_worker(under_zerogpu, own_qwen2, monkeypatch):
    """Where the main process did not load it first (the pick came in another argument), the worker
    names the own model it loaded and the main process loads it through the tab's loader."""
    from backend.core import preload, store, weights
    from backend.pissa import service

    monkeypatch.setattr(preload, "_MIRRORED", [])

    def use(text):
        before = store.load_count()
        service.get_model(own_qwen2)
        return f"{store.load_count() - before}"

    handler = guarded_model_handler(use)
    key = weights.key(service.pick(own_qwen2).preset)
    try:
        assert handler("x") == "1"  # no model pick among the arguments: the worker loaded it
        assert key in store.loaded() and preload.mirrored() == [f"adapters:{own_qwen2}"]
        assert handler("y") == "0"
    finally:
        store.evict(key)


@pytest.fixture(scope="module")
def llava_folders(tmp_path_factory):
    from tests.helpers.standins import build_local
    from tests.helpers.standins import features as SF

    return build_local(
        tmp_path_factory.mktemp("own-llava"), {k: SF.LOCAL[k] for k in ("own-llava15", "own-llava15-sae")}
    )


@pytest.fixture
def own_llava(llava_folders, tmp_path, monkeypatch):
    """A user's own LLaVA folder and its SAE under an allowed root; every read of the VLM's weights or
    the SAE's, in the main process or a worker, is one line of `reads`."""
    from backend.core import picker, preload, weights
    from backend.sae import loading, organism
    from backend.sae.index import INDEX_ENV, INDEX_FILE

    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(llava_folders))
    monkeypatch.setenv(INDEX_ENV, str(tmp_path / "index" / INDEX_FILE))
    monkeypatch.setattr(loading, "_SHELLS", {})
    monkeypatch.setattr(preload, "_MIRRORED", [])
    reads = tmp_path / "reads"
    reads.touch()

    def counted(what, load):
        def read(*a, **k):
            from backend.core.zerogpu import in_main

            with open(reads, "a") as f:
                f.write(f"{what}{'' if in_main() else '-in-a-worker'}\n")
            return load(*a, **k)

        return read

    monkeypatch.setattr(weights, "load", counted("vlm", weights.load))
    monkeypatch.setattr(loading, "load_sae", counted("sae", loading.load_sae))
    picker.forget()
    vlm = str(llava_folders / "own-llava15")
    yield vlm, str(llava_folders / "own-llava15-sae"), "layers.2", reads
    picker.forget()
    from backend.core import store

    store.evict(weights.key(weights.P.custom_preset(organism.TAB, vlm, "transformers.LlavaForConditionalGeneration")))


def features_tab():
    """The Features tab as the app serves it (components.serving.guard.guard_events): its handlers by API name."""
    import gradio as gr

    from app import TabContext
    from components.features import TAB
    from components.serving.guard import guard_events

    with gr.Blocks() as demo:
        with gr.Tabs() as tabs:
            ctx = TabContext(tabs=tabs, source="zoo", registry=[TAB])
            with gr.Tab(TAB.title, id=TAB.id) as tab:
                ctx.tab, ctx.tab_id = tab, TAB.id
                TAB.build(ctx)
    guard_events(demo)
    return {f.api_name: f.fn for f in demo.fns.values() if f.fn is not None and f.api_name}


def scene():
    img = np.zeros((40, 56, 3), np.uint8)
    img[5:20, 10:30] = (200, 40, 40)
    return img


def same_analysis(a, b) -> bool:
    """Two answers of the tab's analysis alike: its image, caption, gallery and table."""
    return (
        np.array_equal(a[0], b[0])
        and a[1] == b[1]
        and a[3].equals(b[3])
        and [c for _, c in a[2]] == [c for _, c in b[2]]
        and all(np.array_equal(x, y) for (x, _), (y, _) in zip(a[2], b[2]))
    )


def test_an_own_features_vlm_and_sae_load_in_main_once_for_every_worker(
    under_zerogpu, own_llava, monkeypatch, tmp_path
):
    """The Load of a user's own VLM + SAE runs in the main process; each later call of the tab, in
    a forked worker, inherits both (the SAE, a view of the VLM's store entry, too) and answers as
    the same call run in-process. Evicted since, or only the VLM loaded (by another tab), they are
    loaded in the main process again before the next worker forks."""
    from backend.core import preload, store, weights
    from backend.core.zerogpu import in_main
    from backend.sae import loading
    from components.features import steering as feature_steering

    vlm, sae, hook, reads = own_llava
    workers = tmp_path / "workers"
    monkeypatch.setattr(under_zerogpu, "CALLS_FILE", str(workers))
    handlers = features_tab()
    source, status, *_ = handlers["features_load"]("zoo", vlm, sae, hook)
    assert source.startswith("own:") and "own-llava15" in status and in_main()
    assert not workers.exists()  # the load ran in the main process
    assert reads.read_text().split() == ["vlm", "sae"]
    first = handlers["analyse_image"](source, scene(), None)
    second = handlers["analyse_image"](source, scene(), None)
    assert len(workers.read_text().splitlines()) == 2  # each call ran in a worker of its own
    assert reads.read_text().split() == ["vlm", "sae"] and preload.mirrored() == []  # neither read them again
    monkeypatch.setattr(under_zerogpu, "_IN_WORKER", True)  # marked calls run here: in-process
    want = feature_steering.analyse(source, scene(), None)
    assert same_analysis(first, want) and same_analysis(second, want)
    monkeypatch.setattr(under_zerogpu, "_IN_WORKER", False)

    org = loading.get_organism(source)
    assert store.evict(org.weights_key) and org.model is None
    assert same_analysis(handlers["analyse_image"](source, scene(), None), want)
    assert reads.read_text().split() == ["vlm", "sae"] * 2  # loaded ahead, in main
    assert store.evict(org.weights_key)
    weights.model(loading.vlm_preset(org))  # as the Adapters tab loads it: the weights without the SAE
    assert same_analysis(handlers["analyse_image"](source, scene(), None), want)
    assert reads.read_text().split() == ["vlm", "sae"] * 3 and preload.mirrored() == []
    assert len(workers.read_text().splitlines()) == 4

    monkeypatch.setenv("WORKBENCH_CUSTOM_MODELS", "0")  # a refusal is the worker's handler's to report
    with pytest.raises(Exception) as refused:
        handlers["analyse_image"](source, scene(), None)
    with pytest.raises(ValueError) as want:
        feature_steering.analyse(source, scene(), None)
    assert "turned off" in str(want.value) and refused.value.message == str(want.value)


def test_an_own_features_vlm_and_sae_a_worker_loaded_are_loaded_in_main_for_the_next(under_zerogpu, own_llava):
    """Where the main process did not load the organism first (no pick among the arguments), the
    worker names the VLM it loaded, and the main process loads the VLM with the SAE its check named."""
    from backend.core import preload
    from backend.sae import analysis, loading

    vlm, sae, hook, reads = own_llava
    source = loading.own_source(vlm, sae, hook)  # checked, metadata only

    def use(text):
        org = loading.get_organism(source, model=True)
        return f"{text} {analysis.analyse_image(org, scene())['caption']}"

    handler = guarded_model_handler(use)
    first = handler("a")
    read = ["vlm-in-a-worker", "sae-in-a-worker", "vlm", "sae"]  # the worker's, then the main process's
    assert reads.read_text().split() == read
    assert preload.mirrored() == [f"features:{vlm}"] and loading.get_organism(source).model is not None
    assert handler("b") == "b" + first[1:] and reads.read_text().split() == read


def test_an_own_model_the_main_process_refused_is_not_checked_again_in_the_worker(
    under_zerogpu, own_qwen2, monkeypatch, tmp_path
):
    """A refused pick (here over the size cap) is checked once, in the main process before the fork;
    the worker's handler reports the same refusal, word for word as in-process, without a second
    check (for a hub id: a second round trip). A pick that passes later is checked afresh."""
    from backend.core import modelcheck
    from backend.pissa import service

    checks = tmp_path / "checks"  # one line per check, in any process
    checks.touch()

    def counted(check):
        def run(*a, **k):
            with open(checks, "a") as f:
                f.write(f"{check.__name__}\n")
            return check(*a, **k)

        return run

    for name in ("allowed_custom", "check_model"):
        monkeypatch.setattr(modelcheck, name, counted(getattr(modelcheck, name)))
    monkeypatch.setenv("WORKBENCH_CUSTOM_MAX_GB", "1KB")

    def use(model, text):
        return service.pick(model).preset.path_or_id

    handler = picked_model_handler(use, "adapters", service.listed())
    with pytest.raises(Exception) as refused:
        handler(own_qwen2, "x")
    assert checks.read_text().split() == ["allowed_custom"]
    with pytest.raises(service.ServiceError) as want:
        monkeypatch.setattr(under_zerogpu, "_IN_WORKER", True)
        try:
            use(own_qwen2, "x")  # in-process (the main process checks afresh)
        finally:
            monkeypatch.setattr(under_zerogpu, "_IN_WORKER", False)
    assert "too large" in str(want.value) and refused.value.message == str(want.value)
    monkeypatch.delenv("WORKBENCH_CUSTOM_MAX_GB")
    assert handler(own_qwen2, "y") == service.pick(own_qwen2).preset.path_or_id
