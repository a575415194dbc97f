import importlib
import sys
import types

import torch

from backend.core import device


def test_cpu_machine_picks_cpu_fp32():
    device.pick_device.cache_clear()
    dev = device.pick_device()
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert dev.type in (expected, "mps")
    if dev.type == "cpu":
        assert device.pick_dtype(dev) == torch.float32
    assert device.pick_dtype(torch.device("cpu"), prefer_half=True) == torch.float32
    assert "cpu" in device.describe() or dev.type != "cpu"


def test_device_override(monkeypatch):
    monkeypatch.setenv("WORKBENCH_DEVICE", "meta")
    device.pick_device.cache_clear()
    try:
        assert device.pick_device().type == "meta"
    finally:
        monkeypatch.delenv("WORKBENCH_DEVICE")
        device.pick_device.cache_clear()


def test_gpu_shim_is_identity_without_spaces():
    from backend.core import zerogpu as shim

    @shim.gpu(duration=lambda n: n * 2)
    def double(n):
        return 2 * n

    assert not shim.spaces_available()
    assert double(21) == 42 and double.__name__ == "double"
    assert double.gpu_duration(3) == 6
    assert shim.gpu(lambda: 7)() == 7


def test_gpu_shim_uses_spaces_when_present(monkeypatch):
    calls = []
    fake = types.ModuleType("spaces")

    def GPU(duration=60):
        def deco(f):
            calls.append(duration)
            f.marked = True
            return f

        return deco

    fake.GPU = GPU
    monkeypatch.setitem(sys.modules, "spaces", fake)
    import backend.core.spaces_pkg as found
    import backend.core.zerogpu as shim

    importlib.reload(found)  # the package is looked for once, at import
    try:

        @shim.gpu(duration=30)
        def f():
            return 1

        assert shim.spaces_available() and f.marked and calls == [30]
    finally:
        monkeypatch.delitem(sys.modules, "spaces")
        importlib.reload(found)
    assert not shim.spaces_available()


# ------------------------------------------------------------------ ZeroGPU audit of the tabs' calls
import ast  # noqa: E402
import inspect  # noqa: E402
import re  # noqa: E402

from tests.conftest import ROOT  # noqa: E402

# What the components call in the backend that never touches a model on the accelerator: loaders
# (models are placed at load, outside any marked function), validators, index/metadata readers.
NOT_GPU = {
    # `longrange_example`: the long-range organism's example text, read from its folder;
    # `check_text_request`: the text, methods and rules checked before a model loads (no model)
    "backend.lrp.service": {
        "load_text",
        "pick_text",
        "load_image",
        "load_longrange",
        "example_image",
        "longrange_example",
        "check_text_request",
    },
    "backend.lrp.heldout": set(),  # listed so the audit reads its calls: every one is a GPU entry point
    # `listed` / `own_source`: the model pickers' lists and metadata checks; `stats_status` loads a
    # picked pipeline (as `get` does: weights placed at load) and reads which statistics it uses
    "backend.nemo.service": {"get", "describe", "parse_neurons", "listed", "stats_status"},
    "backend.sae.loading": {"get_organism", "own_source"},
    "backend.sae.organism": {"refresh_index", "shown_label"},
    "backend.sae.pages": {"feature_table", "feature_page", "page_json", "save_label", "thumbnail"},
    # `check_steering`: a steering request's clamps checked against the organism before the weights load
    "backend.sae.analysis": {
        "default_clamp_value",
        "steering_defaults",
        "model_image",
        "positions_text",
        "clamp_range",
        "check_steering",
    },
    "backend.sae.hub_index": {"index_command"},
    # `pick`: the picked model's preset, from its metadata (the tab's words follow it)
    "backend.mathneuro.service": {"bench", "describe", "register_data", "listed", "pick"},
    # the held-out items a setting is scored on, how many samples each side identifies with,
    # `evaluated`: a setting's cached scores, read without running anything (exports), and
    # `forget_masks`: a setting's cached masks dropped (an MCP call's own items)
    "backend.mathneuro.service.Bench": {"eval_items", "n_ident", "evaluated", "forget_masks"},
    # `config_layer_names`: a checkpoint's layers from its config, built on the meta device
    "backend.pissa.service": {"choices", "preset_for", "layer_names", "request_stop", "listed", "config_layer_names"},
    "backend.pissa.conversion": set(),
}


def _backend_calls() -> dict[str, set[str]]:
    """module → names the components reference on it (`service.check`, `svc.explain_text`,
    `analysis.steer_caption`, `_call(service.error_table, ...)`), plus Bench methods used on a bench."""
    import importlib

    from backend.mathneuro.service import Bench

    bench_methods = {n for n, v in vars(Bench).items() if callable(v) and not n.startswith("_")}
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "components").rglob("*.py")):
        tree = ast.parse(path.read_text())
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("backend."):
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    try:
                        importlib.import_module(full)
                    except ImportError:
                        continue  # a name, not a module
                    aliases[a.asname or a.name] = full
        uses_bench = "backend.mathneuro" in path.read_text()
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not isinstance(node.value, ast.Name):
                continue
            mod = aliases.get(node.value.id)
            if mod in NOT_GPU:
                obj = getattr(importlib.import_module(mod), node.attr, None)
                if inspect.isfunction(obj) or inspect.isgeneratorfunction(obj) or hasattr(obj, "__wrapped__"):
                    found.setdefault(mod, set()).add(node.attr)
            elif uses_bench and node.attr in bench_methods and node.value.id not in aliases:
                found.setdefault("backend.mathneuro.service.Bench", set()).add(node.attr)
    return found


def test_every_backend_entry_point_the_tabs_call_is_marked_for_zerogpu():
    import importlib

    from backend.core import zerogpu as shim

    calls = _backend_calls()
    # the audit sees every tab's backend
    assert {
        "backend.lrp.service",
        "backend.lrp.heldout",
        "backend.nemo.service",
        "backend.sae.analysis",
        "backend.sae.pages",
        "backend.mathneuro.service",
        "backend.mathneuro.service.Bench",
        "backend.pissa.service",
        "backend.pissa.conversion",
    } <= set(calls)
    unmarked, checked = [], 0
    for mod, names in sorted(calls.items()):
        owner = (
            importlib.import_module(mod)
            if not mod.endswith(".Bench")
            else importlib.import_module(mod.rsplit(".", 1)[0]).Bench
        )
        for name in sorted(names - NOT_GPU[mod]):
            fn = getattr(owner, name)
            checked += 1
            if not shim.is_marked(fn):
                unmarked.append(f"{mod}.{name}")
                continue
            # the model is placed at load: no marked function moves a model to a device
            src = inspect.getsource(inspect.unwrap(fn))
            assert not re.search(r"\.cuda\(|\b(model|pipe|unet|vae|text_encoder|sae)\.to\(", src), f"{mod}.{name}"
    assert not unmarked, f"GPU entry points without @gpu: {unmarked}"
    assert checked >= 20
    # the race (a generator) stays a generator function after marking, as Gradio and spaces expect
    from backend.pissa import service as pissa

    assert inspect.isgeneratorfunction(pissa.race_stream)


def test_gpu_estimates_grow_with_the_inputs_and_stay_bounded():
    from backend.core import zerogpu as shim
    from backend.lrp import service as lrp
    from backend.mathneuro.service import Bench, Setting
    from backend.nemo import service as nemo
    from backend.pissa import service as pissa
    from backend.pissa.race import RaceConfig

    assert shim.estimate(nemo.compare, "p", {}, [0]) < shim.estimate(nemo.compare, "p", {}, list(range(8)))
    assert shim.estimate(lrp.explain_text, None, "a b", ["gi"]) < shim.estimate(
        lrp.explain_text, None, "a b" * 200, ["gi", "ig", "mambalrp"]
    )
    s1, s64 = Setting("mathneuro", 5.0, 1, 0.0), Setting("mathneuro", 5.0, 64, 0.0)
    assert shim.estimate(Bench.masks, None, s1) < shim.estimate(Bench.masks, None, s64)
    small = RaceConfig(methods=("lora",), seeds=(0,), steps=50)
    big = RaceConfig(methods=("lora", "pissa", "full"), seeds=(0, 1, 2), steps=2000)
    assert shim.estimate(pissa.race_stream, "k", small) < shim.estimate(pissa.race_stream, "k", big)
    for name, d in shim.MARKED.items():
        if not callable(d):
            assert 0 < d <= shim.MAX_DURATION, name
    assert shim.estimate(pissa.race_stream, "k", "not a config") == 60  # bad input: a default, no crash
    assert shim.estimate(pissa.error_table, "k", 8, ["a", "b"]) < shim.estimate(pissa.error_table, "k", 8)


def test_serving_threads_one_for_the_zoo_unless_set(monkeypatch):
    import torch

    from backend.core.device import serving_threads

    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("WORKBENCH_TORCH_THREADS", raising=False)
        assert serving_threads("zoo") == 1 == torch.get_num_threads()
        monkeypatch.setenv("WORKBENCH_TORCH_THREADS", "2")
        assert serving_threads("zoo") == 2 == torch.get_num_threads()
        monkeypatch.setenv("WORKBENCH_TORCH_THREADS", "nonsense")
        torch.set_num_threads(2)
        assert serving_threads("hub") == 2  # hub checkpoints keep torch's own choice
    finally:
        torch.set_num_threads(before)
