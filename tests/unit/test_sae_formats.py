"""SAEs written by eai-sparsify 1.3.3 and sae-lens 6.54.12 with their own save functions (committed
fixtures, made by scripts/make_sae_fixtures.py): each loads and gives the library's own codes and
reconstructions, or is refused with a message naming its architecture; hookpoints resolve."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from backend.sae.formats import canonical_hookpoint, find_saes, model_hookpoint
from backend.sae.formats import load as load_sae
from backend.sae.sae import (
    GatedSAE,
    JumpReLUSAE,
    MatchingPursuitSAE,
    ReLUSAE,
    SAEFormatError,
    SparseAutoencoder,
    TopKSAE,
)
from backend.sae.steer import clamp_codes

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "sae"
CASES = json.loads((ROOT / "cases.json").read_text())
LOADS = sorted(c for c, m in CASES.items() if m["loads"])
REFUSED = sorted(c for c, m in CASES.items() if not m["loads"])
TOL = 1e-4  # relative, on the whole batch

CLASSES = {
    "topk": TopKSAE,
    "groupmax": TopKSAE,
    "standard": ReLUSAE,
    "jumprelu": JumpReLUSAE,
    "gated": GatedSAE,
    "matching_pursuit": MatchingPursuitSAE,
}
# what each refusal must name
REFUSAL_WORDS = {
    "sparsify_skip": "skip connection",
    "sparsify_transcoder": "transcoder",
    "saelens_batchtopk_train": "batchtopk",
}


def rel(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def test_fixtures_cover_every_case_of_the_issue():
    archs = {(m["library"].split()[0], m["architecture"]) for m in CASES.values()}
    for want in [
        ("eai-sparsify", "topk"),
        ("eai-sparsify", "groupmax"),
        ("sae-lens", "topk"),
        ("sae-lens", "standard"),
        ("sae-lens", "jumprelu"),
        ("sae-lens", "gated"),
        ("sae-lens", "matching_pursuit"),
    ]:
        assert want in archs, want
    assert CASES["saelens_batchtopk"]["architecture"] == "jumprelu"  # BatchTopK saved as JumpReLU
    # SAELens 5.x wrote TopK SAEs as "standard" with a topk activation; SAELens 6 reads them as TopK
    v5 = json.loads((ROOT / "saelens5_topk" / "cfg.json").read_text())
    assert (v5["architecture"], v5["activation_fn_str"]) == ("standard", "topk")
    assert CASES["saelens5_topk"]["library"].startswith("sae-lens 5.")
    assert json.loads((ROOT / "saelens_topk_train_rescale" / "cfg.json").read_text())["rescale_acts_by_decoder_norm"]
    assert set(REFUSED) == set(REFUSAL_WORDS)


@pytest.mark.parametrize("case", LOADS)
def test_loads_with_the_librarys_codes_and_reconstructions(case):
    m = CASES[case]
    ref = load_file(str(ROOT / f"{case}.ref.safetensors"))
    sae = load_sae(ROOT / m["folder"], hookpoint=m["hookpoint"])
    assert isinstance(sae, CLASSES[m["architecture"]])
    x = ref["x"]
    with torch.no_grad():
        z = sae.encode(x)
        vals, idx = sae.encode_sparse(x)
        dense_from_sparse = torch.zeros_like(z).scatter_add_(-1, idx, vals)
        assert rel(z, ref["codes"]) <= TOL, case
        assert rel(sae.decode(z), ref["recon"]) <= TOL, case
        assert rel(sae(x), ref["recon"]) <= TOL, case
        # the sparse codes hold every non-zero code, once
        torch.testing.assert_close(dense_from_sparse, z)
        assert rel(sae.decode_sparse(vals, idx), ref["recon"]) <= TOL, case
    assert (z != 0).any() and (z == 0).any()  # a sparse code, not a degenerate one


@pytest.mark.parametrize("case", REFUSED)
def test_refused_by_architecture_name(case):
    m = CASES[case]
    with pytest.raises(SAEFormatError, match=REFUSAL_WORDS[case]):
        load_sae(ROOT / m["folder"], hookpoint=m["hookpoint"])


def test_groupmax_takes_one_latent_per_group():
    sae = load_sae(ROOT / "sparsify_groupmax" / "layers.2")
    assert sae.activation == "groupmax" and sae.k == 8
    vals, idx = sae.encode_sparse(load_file(str(ROOT / "sparsify_groupmax.ref.safetensors"))["x"])
    groups = idx // (sae.n_latents // sae.k)
    assert (groups == torch.arange(sae.k)).all()


def test_rescaled_topk_checkpoint_is_folded():
    """A TopK training checkpoint with rescale_acts_by_decoder_norm holds unfolded decoder norms; the
    loaded SAE has them folded (unit-norm decoder), and its codes are SAELens's (checked above)."""
    sae = load_sae(ROOT / "saelens_topk_train_rescale")
    torch.testing.assert_close(sae.W_dec.norm(dim=-1), torch.ones(sae.n_latents))
    raw = load_file(str(ROOT / "saelens_topk_train_rescale" / "sae_weights.safetensors"))
    assert (raw["W_dec"].norm(dim=-1) - 1).abs().max() > 0.1  # the file itself is not folded


def test_hookpoints_of_a_sparsify_trainer_folder():
    folder = ROOT / "sparsify_topk"
    assert sorted(e.hookpoint for e in find_saes(folder)) == ["layers.3", "layers.5"]
    x = load_file(str(ROOT / "sparsify_topk.ref.safetensors"))["x"]
    ref = load_sae(folder / "layers.3")
    assert ref.cfg.hookpoint == "model.layers.3"  # the trainer's name, relative to the base model
    for name in ("layers.3", "model.layers.3", "model.language_model.layers.3"):
        sae = load_sae(folder, hookpoint=name)
        assert sae.cfg.hookpoint == name
        torch.testing.assert_close(sae(x), ref(x))
    with pytest.raises(SAEFormatError, match=r"several hookpoints \['layers.3', 'layers.5'\]"):
        load_sae(folder)
    with pytest.raises(SAEFormatError, match=r"no SAE for hookpoint 'model.layers.4'.*\['layers.3', 'layers.5'\]"):
        load_sae(folder, hookpoint="model.layers.4")


def test_a_folder_with_one_hookpoint_refuses_another_name():
    with pytest.raises(SAEFormatError, match=r"no SAE for hookpoint 'model.layers.9'.*\['layers.2'\]"):
        load_sae(ROOT / "sparsify_groupmax", hookpoint="model.layers.9")
    with pytest.raises(SAEFormatError, match=r"'layers.5'.*\['model.layers.3'\]"):
        load_sae(ROOT / "saelens_topk", hookpoint="layers.5")
    with pytest.raises(SAEFormatError, match=r"model.layers.6"):
        load_sae(ROOT / "gemmascope", hookpoint="model.layers.6")


def test_saelens_metadata_hook_names():
    # SAELens 6 keeps the TransformerLens hook name under metadata: resid_post is a layer's output,
    # resid_pre its input
    assert load_sae(ROOT / "saelens_gated").cfg.hookpoint == "model.layers.5"
    assert load_sae(ROOT / "saelens_jumprelu").cfg.hookpoint == "model.layers.4:input"
    assert (
        load_sae(ROOT / "saelens_gated", hookpoint="model.language_model.layers.5").cfg.hookpoint
        == "model.language_model.layers.5"
    )
    assert load_sae(ROOT / "gemmascope").cfg.hookpoint == "model.layers.7"
    assert canonical_hookpoint("blocks.4.hook_resid_pre") == "layers.4:input"
    # a full module name is the model's own and stays as written
    assert model_hookpoint("model.language_model.layers.0") == "model.language_model.layers.0"
    assert model_hookpoint("blocks.2.hook_mlp_out") == "blocks.2.hook_mlp_out"


@pytest.mark.parametrize(
    "case", ["saelens_standard", "saelens_jumprelu", "saelens_gated", "saelens_matching_pursuit", "sparsify_groupmax"]
)
def test_non_topk_saes_work_with_steering(case):
    """Codes = the SAE's activations; clamping a feature through the steering code changes exactly
    that feature's share of the reconstruction."""
    m = CASES[case]
    sae: SparseAutoencoder = load_sae(ROOT / m["folder"], hookpoint=m["hookpoint"])
    x = load_file(str(ROOT / f"{case}.ref.safetensors"))["x"]
    with torch.no_grad():
        z = sae.encode(x)
        f = int((z != 0).sum(0).argmax())
        out = clamp_codes(sae, x, f, 5.0, add_error=False)
        z_clamped = z.clone()
        z_clamped[:, f] = 5.0
        torch.testing.assert_close(out, sae.decode(z_clamped), rtol=1e-5, atol=1e-5)
        # with the error term added back, clamping to the feature's own value changes nothing
        same = torch.stack(
            [clamp_codes(sae, x[i : i + 1], f, float(z[i, f]), add_error=True)[0] for i in range(len(x))]
        )
        torch.testing.assert_close(same, x, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "case", ["saelens_standard", "saelens_jumprelu", "saelens_gated", "saelens_matching_pursuit", "saelens_topk"]
)
def test_saelens_layout_round_trip(tmp_path, case):
    m = CASES[case]
    sae = load_sae(ROOT / m["folder"])
    again = load_sae(sae.save(tmp_path / case, layout="saelens"))
    assert type(again) is type(sae) and again.cfg.hookpoint == sae.cfg.hookpoint
    x = load_file(str(ROOT / f"{case}.ref.safetensors"))["x"]
    torch.testing.assert_close(again.encode(x), sae.encode(x))
    torch.testing.assert_close(again(x), sae(x))


def test_a_hookpoint_cannot_name_a_folder_outside_the_sae_folder():
    with pytest.raises(SAEFormatError, match="no SAE for hookpoint"):
        load_sae(ROOT / "sparsify_topk", hookpoint="../sparsify_groupmax/layers.2")


def test_an_unreadable_folder_does_not_hide_its_neighbours(tmp_path):
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "sparsify_topk", repo)
    (repo / "layers.9").mkdir()
    (repo / "layers.9" / "cfg.json").write_text("{}")  # weights missing
    x = load_file(str(ROOT / "sparsify_topk.ref.safetensors"))["x"]
    torch.testing.assert_close(
        load_sae(repo, hookpoint="model.layers.3")(x), load_sae(ROOT / "sparsify_topk/layers.3")(x)
    )
    with pytest.raises(SAEFormatError, match=r"layers.9: no sae.safetensors"):
        load_sae(repo, hookpoint="layers.9")


@pytest.mark.parametrize(
    "key,value,words",
    [
        ("normalize_activations", "layer_norm", "layer_norm"),
        ("normalize_activations", "constant_norm_rescale", "constant_norm_rescale"),
        ("normalize_activations", "expected_average_only_in", "expected_average"),
        ("reshape_activations", "hook_z", "hook_z"),
        ("architecture", "jumprelu_transcoder", "transcoder"),
        ("architecture", "abstopk", "abstopk"),
    ],
)
def test_settings_the_workbench_does_not_compute_are_refused_by_name(tmp_path, key, value, words):
    import shutil

    folder = tmp_path / "sae"
    shutil.copytree(ROOT / "saelens_gated", folder)
    cfg = json.loads((folder / "cfg.json").read_text())
    cfg[key] = value
    (folder / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(SAEFormatError, match=words):
        load_sae(folder)


@pytest.mark.parametrize("case", ["saelens_jumprelu", "saelens_matching_pursuit"])
def test_non_topk_codes_feed_the_feature_index(case):
    """The index sees every non-zero code of a learned-sparsity SAE, though the code width varies
    from batch to batch: its firing counts and mean activations are the dense codes' own."""
    from backend.sae.index import IndexBuilder

    m = CASES[case]
    sae = load_sae(ROOT / m["folder"])
    x = load_file(str(ROOT / f"{case}.ref.safetensors"))["x"].reshape(6, 4, -1)  # 6 images x 4 patches
    builder = IndexBuilder(sae.n_latents, 4, top_k=3)
    widths = set()
    with torch.no_grad():
        for lo in range(0, 6, 2):
            vals, idx = sae.encode_sparse(x[lo : lo + 2])
            widths.add(vals.shape[-1])
            builder.update(vals, idx)
        z = sae.encode(x).reshape(-1, sae.n_latents)
    t = builder.tensors()
    assert torch.equal(t["fire_count"], (z > 0).sum(0))
    torch.testing.assert_close(t["mean_act"], (z.sum(0) / (z > 0).sum(0).clamp(min=1)).float())
    assert max(widths) < sae.n_latents
