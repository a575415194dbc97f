"""TopK SAE: the math, both on-disk layouts (forward equivalence), training on planted sparse data."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from backend.sae.formats import load as load_sae
from backend.sae.sae import SAEFormatError, TopKSAE
from backend.sae.train import evaluate, train_sae

torch.set_num_threads(1)


def reference_encode(x, W_enc_nd, b_enc, b_dec, k):
    """The published formula written out: TopK(ReLU(W_enc (x − b_dec) + b_enc)) as a dense code."""
    pre = torch.relu(torch.einsum("nd,bd->bn", W_enc_nd, x - b_dec) + b_enc)
    z = torch.zeros_like(pre)
    for i in range(pre.shape[0]):
        order = torch.argsort(pre[i], descending=True)[:k]
        z[i, order] = pre[i, order]
    return z


def random_sae(d=12, n=40, k=5, seed=0):
    torch.manual_seed(seed)
    sae = TopKSAE(d, n, k, hookpoint="model.layers.3")
    with torch.no_grad():
        sae.W_enc.normal_()
        sae.b_enc.normal_(0, 0.3)
        sae.b_dec.normal_()
    return sae


def test_encode_decode_match_the_formula():
    sae = random_sae()
    x = torch.randn(16, 12)
    z = sae.encode(x)
    ref = reference_encode(x, sae.W_enc, sae.b_enc, sae.b_dec, sae.k)
    torch.testing.assert_close(z, ref)
    assert ((z != 0).sum(-1) <= sae.k).all()
    assert (z >= 0).all()
    torch.testing.assert_close(sae.decode(z), ref @ sae.W_dec + sae.b_dec)
    torch.testing.assert_close(sae(x), sae.decode(z), rtol=1e-5, atol=1e-5)
    # decoder rows are unit norm
    torch.testing.assert_close(sae.W_dec.norm(dim=1), torch.ones(sae.n_latents))
    # leading dimensions are kept
    assert sae.encode(torch.randn(2, 3, 12)).shape == (2, 3, 40)
    assert sae.decode(torch.zeros(2, 3, 40)).shape == (2, 3, 12)


@pytest.mark.parametrize("layout,weights", [("sparsify", "sae.safetensors"), ("saelens", "sae_weights.safetensors")])
def test_layouts_round_trip_with_forward_equivalence(tmp_path, layout, weights):
    sae = random_sae()
    folder = sae.save(tmp_path / layout, layout=layout)
    stored = load_file(str(folder / weights))
    cfg = json.loads((folder / "cfg.json").read_text())
    if layout == "sparsify":
        assert set(stored) == {"encoder.weight", "encoder.bias", "W_dec", "b_dec"}
        assert stored["encoder.weight"].shape == (40, 12) and cfg["num_latents"] == 40 and cfg["k"] == 5
        W_enc_nd = stored["encoder.weight"]
        b_enc = stored["encoder.bias"]
    else:
        assert set(stored) == {"W_enc", "b_enc", "W_dec", "b_dec"}
        assert stored["W_enc"].shape == (12, 40) and cfg["d_sae"] == 40 and cfg["architecture"] == "topk"
        W_enc_nd = stored["W_enc"].T
        b_enc = stored["b_enc"]
    loaded = load_sae(folder)
    assert loaded.cfg.extra["layout"] == layout
    assert loaded.cfg.hookpoint == "model.layers.3"
    x = torch.randn(32, 12)
    # forward equivalence against the math applied to the raw stored tensors
    z_ref = reference_encode(x, W_enc_nd, b_enc, stored["b_dec"], cfg.get("k"))
    torch.testing.assert_close(loaded.encode(x), z_ref)
    torch.testing.assert_close(loaded.decode(z_ref), z_ref @ stored["W_dec"] + stored["b_dec"])
    torch.testing.assert_close(loaded(x), sae(x))


def test_layouts_agree_with_each_other(tmp_path):
    sae = random_sae(seed=3)
    a = load_sae(sae.save(tmp_path / "a", layout="sparsify"))
    b = load_sae(sae.save(tmp_path / "b", layout="saelens"))
    x = torch.randn(64, 12)
    torch.testing.assert_close(a.encode(x), b.encode(x))
    torch.testing.assert_close(a(x), b(x))


def test_hub_style_folder_per_hookpoint(tmp_path):
    """lmms-lab repos hold one folder per hookpoint (model.layers.24/cfg.json + sae.safetensors)."""
    repo = tmp_path / "repo"
    a, b = random_sae(seed=1), random_sae(seed=2)
    a.cfg.hookpoint, b.cfg.hookpoint = "", "model.layers.8"
    a.save(repo / "model.layers.24")
    b.save(repo / "model.layers.8")
    x = torch.randn(8, 12)
    sae = load_sae(repo, hookpoint="model.layers.24")
    assert sae.cfg.hookpoint == "model.layers.24"
    torch.testing.assert_close(sae(x), a(x))
    # the other spellings of a decoder layer's output name the same SAE
    for name in ("layers.8", "model.language_model.layers.8", "blocks.8.hook_resid_post"):
        torch.testing.assert_close(load_sae(repo, hookpoint=name)(x), b(x))
    with pytest.raises(SAEFormatError, match="several hookpoints"):
        load_sae(repo)
    with pytest.raises(SAEFormatError, match=r"no SAE for hookpoint 'model.layers.9'.*model.layers.24.*model.layers.8"):
        load_sae(repo, hookpoint="model.layers.9")


def test_bad_folders_are_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SAEFormatError):
        load_sae(tmp_path / "empty")
    bad = tmp_path / "bad"
    random_sae().save(bad, layout="saelens")
    cfg = json.loads((bad / "cfg.json").read_text())
    cfg["architecture"] = "temporal"
    (bad / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(SAEFormatError, match="temporal"):
        load_sae(bad)
    cfg["architecture"] = "jumprelu"
    (bad / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(SAEFormatError, match="threshold"):
        load_sae(bad)
    mism = tmp_path / "mism"
    random_sae().save(mism)
    w = load_file(str(mism / "sae.safetensors"))
    w["b_dec"] = torch.zeros(7)
    save_file(w, str(mism / "sae.safetensors"))
    with pytest.raises(SAEFormatError, match="shapes|d_in"):
        load_sae(mism)


def planted_sparse_data(n=20000, d=16, n_true=24, active=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    dirs = torch.nn.functional.normalize(torch.randn(n_true, d, generator=g), dim=1)
    idx = torch.stack([torch.randperm(n_true, generator=g)[:active] for _ in range(n)])
    vals = torch.rand(n, active, generator=g) * 2 + 0.5
    x = (vals.unsqueeze(-1) * dirs[idx]).sum(1) + 0.3
    return x


@pytest.mark.timeout(120)
def test_training_reaches_low_fvu_with_few_dead_latents():
    x = planted_sparse_data()
    train, held = x[:16000], x[16000:]
    sae, hist = train_sae(train, n_latents=32, k=3, steps=600, batch=512, lr=3e-3, seed=0)
    assert hist[-1]["fvu"] < hist[0]["fvu"]
    ev = evaluate(sae, held)
    assert ev["fvu"] < 0.1, ev
    assert ev["dead_fraction"] <= 0.1, ev
    assert ev["l0"] <= 3


def test_auxk_loss_is_used_for_dead_latents():
    sae = random_sae()
    x = torch.randn(256, 12)
    sae.steps_since_fired.fill_(10**6)
    out = sae.losses(x, dead_after=100)
    assert "auxk" in out and torch.isfinite(out["auxk"])
    out["loss"].backward()
    assert sae.W_enc.grad is not None and sae.W_enc.grad.abs().sum() > 0


@pytest.mark.parametrize("ties", [False, True])
def test_grouped_topk_selects_what_torch_topk_selects(ties):
    from backend.sae.sae import grouped_topk

    g = torch.Generator().manual_seed(3)
    x = torch.randn(37, 4096, generator=g)
    if ties:  # few distinct values: whole groups tie at their maximum
        x = (x * 2).round()
    vals, idx = grouped_topk(x, 16)
    ref, _ = x.topk(16, dim=-1)
    assert torch.equal(vals.sort(-1, descending=True).values, ref)
    assert torch.equal(x.gather(1, idx), vals)
    assert all(len(set(row)) == 16 for row in idx.tolist())  # 16 distinct latents per token


def test_the_decoder_sum_in_chunks_is_the_same_sum(monkeypatch):
    """weighted_rows gathers at most GATHER_ELEMENTS decoder entries at once (a hub SAE's k = 256 rows
    of 4096 for each of 2,900 prompt tokens were 12 GB): chunked, every row's sum is the same, bit for
    bit, as the whole gather's."""
    from backend.sae import sparse_ops

    g = torch.Generator().manual_seed(0)
    W = torch.randn(300, 48, generator=g)
    vals = torch.rand(2, 37, 5, generator=g)
    idx = torch.randint(0, 300, (2, 37, 5), generator=g)
    whole = (vals.unsqueeze(-1) * W[idx]).sum(-2)
    monkeypatch.setattr(sparse_ops, "GATHER_ELEMENTS", 7 * 5 * 48)  # 7 rows a chunk: 11 chunks, the last short
    got = sparse_ops.weighted_rows(W, vals, idx)
    assert got.shape == (2, 37, 48) and torch.equal(got, whole)
    sae = TopKSAE(48, 300, 5)
    v, i = sae.encode_sparse(torch.randn(37, 48, generator=g))
    monkeypatch.setattr(sparse_ops, "GATHER_ELEMENTS", 1)  # one row a chunk
    chunked = sae.decode_sparse(v, i)
    monkeypatch.setattr(sparse_ops, "GATHER_ELEMENTS", 1 << 25)
    assert torch.equal(chunked, sae.decode_sparse(v, i))
