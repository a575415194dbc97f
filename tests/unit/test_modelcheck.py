"""Architecture, size and policy checks on a model folder or hub id, from metadata only."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import components
from backend.core import modelcheck as mc
from backend.core import modelmeta
from backend.core import presets as P
from backend.core.modelcheck import ModelCheckError, check_model


def write_model(folder: Path, config: dict, tensors: dict | None = None, name="model.safetensors") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(tensors or {"w": torch.zeros(10, 4)}, str(folder / name))
    return folder


def lm(arch: str, model_type: str, **extra) -> dict:
    return {"architectures": [arch], "model_type": model_type, **extra}


def write_pipeline(folder: Path, cls="StableDiffusionPipeline", unet=None, **components) -> Path:
    index = {
        "_class_name": cls,
        "_diffusers_version": "0.42.1",
        "unet": ["diffusers", "UNet2DConditionModel"],
        "text_encoder": ["transformers", "CLIPTextModel"],
        "scheduler": ["diffusers", "DDIMScheduler"],
        **components,
    }
    (folder / "unet").mkdir(parents=True)
    (folder / "model_index.json").write_text(json.dumps(index))
    unet = unet or {
        "_class_name": "UNet2DConditionModel",
        "cross_attention_dim": 32,
        "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
    }
    (folder / "unet" / "config.json").write_text(json.dumps(unet))
    save_file({"conv.weight": torch.zeros(8, 4, 3, 3)}, str(folder / "unet" / "diffusion_pytorch_model.safetensors"))
    save_file(
        {"conv.weight": torch.zeros(8, 4, 3, 3, dtype=torch.float16)},
        str(folder / "unet" / "diffusion_pytorch_model.fp16.safetensors"),
    )  # a variant: not counted again
    (folder / "text_encoder").mkdir()
    save_file({"emb": torch.zeros(16, 8)}, str(folder / "text_encoder" / "model.safetensors"))
    return folder


@pytest.fixture
def root(tmp_path, monkeypatch):
    for name in ("SPACE_ID", "WORKBENCH_CUSTOM_MODELS", "WORKBENCH_CUSTOM_OWNERS", "WORKBENCH_CUSTOM_MAX_GB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORKBENCH_MODEL_ROOTS", str(tmp_path / "models"))
    (tmp_path / "models").mkdir()
    return tmp_path / "models"


def test_a_real_saved_model_is_counted_from_its_headers(root):
    from tests.helpers.tiny import tiny_llama

    model = tiny_llama(seed=0)
    model.save_pretrained(root / "llama")
    got = check_model(str(root / "llama"), "math")
    assert got.architecture == "LlamaForCausalLM" and got.method == "math_neurons" and got.local
    assert got.n_params == sum(p.numel() for p in model.parameters())
    assert got.n_bytes == 4 * got.n_params
    assert "LlamaForCausalLM" in got.summary() and "parameters" in got.summary()
    with pytest.raises(ModelCheckError, match="^LlamaForCausalLM: MambaLRP needs a Mamba model"):
        check_model(str(root / "llama"), "relevance")
    preset = got.preset()  # the checked model loads through the one loading path
    assert (preset.source, preset.tab, preset.model_class) == ("local", "math_neurons", "transformers.LlamaForCausalLM")
    assert preset.model_id.startswith("local:") and preset not in P.presets()
    again = P.load_preset(preset)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), model.state_dict().values()))


@pytest.mark.parametrize(
    "arch,model_type,fits",
    [
        ("MambaForCausalLM", "mamba", {"relevance", "math_neurons", "adapters"}),
        ("FalconMambaForCausalLM", "falcon_mamba", {"relevance", "math_neurons", "adapters"}),
        ("Mamba2ForCausalLM", "mamba2", {"math_neurons", "adapters"}),
        ("LlavaForConditionalGeneration", "llava", {"features", "adapters"}),
        ("LlavaNextForConditionalGeneration", "llava_next", {"features", "adapters"}),
        ("Qwen2ForCausalLM", "qwen2", {"math_neurons", "adapters"}),
        ("GPT2LMHeadModel", "gpt2", set()),
        ("MyOwnForCausalLM", "mine", set()),
    ],
)
def test_which_methods_take_which_architectures(root, arch, model_type, fits):
    folder = write_model(root / arch, lm(arch, model_type))
    reasons = mc.fitting_methods(str(folder))
    assert {m for m, why in reasons.items() if why is None} == fits
    for method, why in reasons.items():
        if why is not None:
            assert why.startswith(arch)
            with pytest.raises(ModelCheckError, match=arch):
                check_model(str(folder), method)


def test_refusals_name_their_reason(root):
    gpt2 = write_model(root / "gpt2", lm("GPT2LMHeadModel", "gpt2"))
    with pytest.raises(ModelCheckError, match="gpt2 models use transformers' Conv1D"):
        check_model(str(gpt2), "math_neurons")
    with pytest.raises(ModelCheckError, match="not a model class of the installed transformers"):
        check_model(str(write_model(root / "mine", lm("MyOwnForCausalLM", "mine"))), "adapters")
    remote = write_model(root / "remote", lm("LlamaForCausalLM", "llama", auto_map={"AutoModel": "x.Y"}))
    with pytest.raises(ModelCheckError, match="remote code"):
        check_model(str(remote), "math")
    with pytest.raises(P.PresetError, match="no model at"):
        check_model(str(root / "missing"), "math")
    with pytest.raises(P.PresetError, match="outside the allowed model folders"):
        check_model(str(root.parent), "math")
    pickles = root / "pickles"
    pickles.mkdir()
    (pickles / "config.json").write_text(json.dumps(lm("LlamaForCausalLM", "llama")))
    (pickles / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(P.PresetError, match="refusing pickle weights"):
        check_model(str(pickles), "math")
    empty = root / "empty"
    empty.mkdir()
    save_file({"w": torch.zeros(1)}, str(empty / "model.safetensors"))
    with pytest.raises(ModelCheckError, match="no config.json"):
        check_model(str(empty), "math")
    big = write_model(root / "big", lm("LlamaForCausalLM", "llama"), {"w": torch.zeros(1000)})
    with pytest.raises(ModelCheckError, match="too large .*4000 bytes|too large"):
        check_model(str(big), "math", max_bytes=3999)
    assert check_model(str(big), "math", max_bytes=4000).n_bytes == 4000
    with pytest.raises(ModelCheckError, match="unknown method"):
        check_model(str(big), "astrology")


def test_stable_diffusion_pipelines(root):
    sd = write_pipeline(root / "sd")
    got = check_model(str(sd), "nemo")
    assert got.architecture == "StableDiffusionPipeline" and got.method == "memorization"
    assert got.model_class == "diffusers.StableDiffusionPipeline"
    assert got.n_params == 8 * 4 * 9 + 16 * 8 and got.n_bytes == 4 * got.n_params  # fp16 variant skipped
    with pytest.raises(ModelCheckError, match="StableDiffusionPipeline is a diffusers pipeline"):
        check_model(str(sd), "math")
    xl = write_pipeline(root / "xl", cls="StableDiffusionXLPipeline")
    with pytest.raises(ModelCheckError, match="^StableDiffusionXLPipeline: NeMo needs a Stable Diffusion 1.x/2.x"):
        check_model(str(xl), "memorization")
    plain = write_pipeline(
        root / "plain", unet={"_class_name": "UNet2DConditionModel", "down_block_types": ["DownBlock2D"]}
    )
    with pytest.raises(ModelCheckError, match="no text cross-attention"):
        check_model(str(plain), "memorization")
    custom = write_pipeline(root / "custom", safety_checker=["my_pkg.checker", "Checker"])
    with pytest.raises(ModelCheckError, match="remote code"):
        check_model(str(custom), "memorization")


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A local hub cache: the path hf_hub_download answers from when HF_HUB_OFFLINE=1."""
    import huggingface_hub.constants as C

    cache = tmp_path / "hub"
    monkeypatch.setattr(C, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", True)

    def cached(repo: str, config: dict, nfloats: int = 10) -> None:
        commit = "a" * 40
        base = cache / f"models--{repo.replace('/', '--')}"
        (base / "refs").mkdir(parents=True)
        (base / "refs" / "main").write_text(commit)
        write_model(base / "snapshots" / commit, config, {"w": torch.zeros(nfloats)})

    return cached


def test_hub_ids_read_from_the_cache_offline(root, hub_cache):
    hub_cache("someone/tiny-mamba", lm("MambaForCausalLM", "mamba"))
    got = check_model("someone/tiny-mamba", "relevance")
    assert not got.local and got.location == "someone/tiny-mamba"
    assert got.preset("relevance").model_id == "hub:someone/tiny-mamba@main"
    assert (got.n_params, got.n_bytes) == (10, 40)  # offline: from the cached weights' headers
    with pytest.raises(ModelCheckError, match="the hub is not reachable and it is not in the local cache"):
        check_model("someone/not-cached", "relevance")
    hub_cache("someone/old-mamba", lm("MambaForCausalLM", "mamba"))
    snapshot = modelmeta._hub_file("someone/old-mamba", "config.json", None).parent  # a cached pickle-only repo
    for f in snapshot.glob("*.safetensors"):
        f.unlink()
    (snapshot / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(P.PresetError, match="refusing pickle weights"):
        check_model("someone/old-mamba", "relevance")


def test_custom_model_policy(root, hub_cache, monkeypatch):
    hub_cache("friends/small-llama", lm("LlamaForCausalLM", "llama"))
    hub_cache("strangers/huge-llama", lm("LlamaForCausalLM", "llama"), nfloats=1000)
    folder = write_model(root / "mine", lm("LlamaForCausalLM", "llama"))
    mc.allowed_custom("strangers/huge-llama")  # a local run allows custom models
    mc.allowed_custom(str(folder))
    monkeypatch.setenv("WORKBENCH_CUSTOM_MODELS", "0")
    with pytest.raises(ModelCheckError, match="turned off on this server"):
        mc.allowed_custom(str(folder))

    monkeypatch.delenv("WORKBENCH_CUSTOM_MODELS")
    monkeypatch.setenv("SPACE_ID", "someone/workbench")
    with pytest.raises(ModelCheckError, match="custom models are off on this Space"):
        mc.allowed_custom("strangers/huge-llama")
    mc.allowed_custom(str(folder))  # folders under the owner's allowed roots stay allowed
    monkeypatch.setenv("WORKBENCH_CUSTOM_OWNERS", "Friends, colleagues")
    mc.allowed_custom("friends/small-llama")
    with pytest.raises(ModelCheckError, match="allowed owners: colleagues, friends"):
        mc.allowed_custom("strangers/huge-llama")

    monkeypatch.setenv("WORKBENCH_CUSTOM_MODELS", "1")
    assert mc.custom_max_bytes() == 20 * 10**9  # the Space's default cap
    monkeypatch.setenv("WORKBENCH_CUSTOM_MAX_GB", "0.000001")  # 1000 bytes
    mc.allowed_custom("friends/small-llama")  # 40 bytes
    with pytest.raises(ModelCheckError, match="too large for this server"):
        mc.allowed_custom("strangers/huge-llama")  # 4000 bytes
    with pytest.raises(ModelCheckError, match="too large for this server"):
        check_model("strangers/huge-llama", "math")  # the cap applies to the check too
    with pytest.raises(ModelCheckError, match="cannot read the config"):
        mc.allowed_custom("strangers/not-cached")


def test_registered_presets_pass_the_policy(root, monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/workbench")
    preset = P.register(P.Preset("unit_modelcheck", "hub", "papers/checkpoint", "transformers.LlamaForCausalLM"))
    try:
        mc.allowed_custom("papers/checkpoint")  # no metadata needed: the owner chose it
        with pytest.raises(ModelCheckError, match="off on this Space"):
            mc.allowed_custom("papers/other")
    finally:
        P._REGISTRY.pop(preset.tab)


def test_sizes_from_the_hubs_metadata(monkeypatch):
    """What the hub answers (its metadata objects, built here) becomes parameters and bytes; a
    pipeline's files are summed without their variants; a repo without safetensors is refused."""
    import huggingface_hub as hf
    from huggingface_hub.errors import NotASafetensorsRepoError
    from huggingface_hub.hf_api import RepoSibling
    from huggingface_hub.utils._safetensors import SafetensorsFileMetadata, SafetensorsRepoMetadata, TensorInfo

    tensors = {"a": TensorInfo("BF16", [10, 4], (0, 80)), "b": TensorInfo("F32", [3], (80, 92))}
    repos = {
        "org/lm": SafetensorsRepoMetadata(
            None,
            False,
            {"a": "m.safetensors", "b": "m.safetensors"},
            {"m.safetensors": SafetensorsFileMetadata({}, tensors)},
        )
    }
    files = {
        "org/sd": [
            "unet/diffusion_pytorch_model.safetensors",
            "unet/diffusion_pytorch_model.fp16.safetensors",
            "vae/diffusion_pytorch_model.fp16.safetensors",
            "model_index.json",
            "text_encoder/model.fp16-00001-of-00002.safetensors",
            "text_encoder/model-00001-of-00001.safetensors",
        ],
        "org/old": ["pytorch_model.bin", "config.json"],
    }

    def metadata(repo, revision=None):
        if repo not in repos:
            raise NotASafetensorsRepoError(repo)
        return repos[repo]

    class Info:
        def __init__(self, repo):
            self.siblings = [RepoSibling(name, size=1000 * (i + 1)) for i, name in enumerate(files[repo])]

    monkeypatch.setattr(hf, "get_safetensors_metadata", metadata)
    monkeypatch.setattr(hf.HfApi, "model_info", lambda self, repo, **kw: Info(repo))
    mc._HUB_SIZES.clear()
    assert mc._hub_size("org/lm", None) == (43, 92)
    # unet and text encoder without their fp16 twins (sharded too); the vae's only file
    assert mc._hub_size("org/sd", None) == (None, 1000 + 3000 + 6000)
    with pytest.raises(ModelCheckError, match="no safetensors weights"):
        mc._hub_size("org/old", None)
    mc._HUB_SIZES.clear()


def test_a_pipeline_component_from_a_diffusers_pipeline_module_is_not_remote_code(root):
    """SD-1.x's model_index.json names its safety checker ["stable_diffusion", ...]: diffusers' own."""
    ok = write_pipeline(root / "sd15", safety_checker=["stable_diffusion", "StableDiffusionSafetyChecker"])
    assert check_model(str(ok), "memorization").architecture == "StableDiffusionPipeline"
    bad = write_pipeline(root / "remote", safety_checker=["my_package", "Checker"])
    with pytest.raises(ModelCheckError, match="comes from 'my_package', remote code"):
        check_model(str(bad), "memorization")


def test_each_method_package_declares_its_rule_and_a_new_rule_is_used(root, monkeypatch):
    """The five tabs' rules come from their own packages, in the tabs' order; a method that registers
    a rule is checked by it, listed by fitting_methods and named when a method is unknown."""
    assert mc.methods() == tuple(t.id for t in components.tabs() if t.paper)
    assert [r.problem.__module__ for r in mc.rules()] == [
        f"backend.{pkg}.rules" for pkg in ("lrp", "sae", "nemo", "mathneuro", "pissa")
    ]
    assert mc.method_rule("features").architectures[0] == "LlavaForConditionalGeneration"

    monkeypatch.setattr(mc, "_RULES", dict(mc._RULES))  # the test's rule leaves with the test

    def stars_only(meta: modelmeta.ModelMeta) -> str | None:
        return None if meta.config.get("model_type") == "stars" else f"{meta.architecture}: astrology reads the stars"

    mc.register_rule(mc.MethodRule(method="astrology", problem=stars_only, order=9, aliases=("horoscope",)))
    stars = write_model(root / "stars", lm("StarForCausalLM", "stars"))
    assert check_model(str(stars), "Horoscope").method == "astrology"
    llama = write_model(root / "llama", lm("LlamaForCausalLM", "llama"))
    with pytest.raises(ModelCheckError, match="^LlamaForCausalLM: astrology reads the stars$"):
        check_model(str(llama), "astrology")
    reasons = mc.fitting_methods(str(llama))
    assert list(reasons)[-1] == "astrology" and reasons["math_neurons"] is None
    unet = modelmeta.ModelMeta(
        "unet", True, None, {"_class_name": "UNet2DModel", "_diffusers_version": "0.1"}, None, None
    )
    assert (
        mc.architecture_problem(unet, "astrology")
        == "UNet2DModel is a diffusers model: the astrology tab takes a transformers model"
    )
    with pytest.raises(
        ModelCheckError, match="expected one of relevance, features, memorization, math_neurons, adapters, astrology$"
    ):
        mc.method_key("alchemy")
    with pytest.raises(ValueError, match="lrp already names 'relevance'"):
        mc.register_rule(mc.MethodRule(method="alchemy", problem=stars_only, order=10, aliases=("lrp",)))
