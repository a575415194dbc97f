"""MathNeuro's batched selection and unpadded forwards give the per-matrix, masked results exactly,
and identification asks little of the device: its norms stay there, its masks cross as bits once."""

import pytest
import torch

from backend.mathneuro import core, select
from benchmarks.account import account
from tests.helpers.tiny import tiny_llama

torch.set_num_threads(1)


def per_matrix(scores: torch.Tensor, top_k: float) -> torch.Tensor:
    """The definition: a stable descending sort's first int(K·N) entries (ties to the lowest position)."""
    k = int(top_k * scores.numel())
    m = torch.zeros(scores.numel(), dtype=torch.bool)
    m[scores.flatten().argsort(descending=True, stable=True)[:k]] = True
    return m.view(scores.shape)


def coarse(model, levels=3, seed=0):
    """Weights of a few distinct magnitudes, so that scores tie at every threshold."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-levels, levels + 1, p.shape, generator=g).float() / levels)
    return model


def test_top_fraction_breaks_ties_by_position():
    s = torch.tensor([[1.0, 3.0, 3.0, 2.0], [3.0, 0.0, 3.0, 3.0]])
    assert core.top_fraction(s, 0.25).tolist() == [[False, True, True, False], [False, False, False, False]]
    assert core.top_fraction(s, 0.5).tolist() == [[False, True, True, False], [True, False, True, False]]
    for k in (0.1, 0.3, 0.6, 0.9, 1.0):
        assert torch.equal(core.top_fraction(s, k), per_matrix(s, k)), k


@pytest.mark.parametrize("chunk", [select.CHUNK, 1500])  # one call per shape, or several chunks per shape
def test_batched_selection_equals_per_matrix_ties_included(monkeypatch, chunk):
    monkeypatch.setattr(select, "CHUNK", chunk)
    model = coarse(tiny_llama(seed=1))
    layers = core.linear_layers(model)
    g = torch.Generator().manual_seed(2)
    # norms of few values too: equal scores across columns as well as down them
    nm = {n: torch.randint(1, 3, (m.in_features,), generator=g).double() for n, m in layers.items()}
    nn_ = {n: torch.randint(1, 3, (m.in_features,), generator=g).double() for n, m in layers.items()}
    w = {f"{n}.weight": m.weight for n, m in layers.items()}
    for k in (0.05, 0.3):
        got = core.masks_from_norms(model, nm, k, minus=nn_)
        ties = 0
        for n in layers:
            s_m = w[f"{n}.weight"].abs() * nm[n].float()[None]
            s_n = w[f"{n}.weight"].abs() * nn_[n].float()[None]
            want = per_matrix(s_m, k) & ~per_matrix(s_n, k)
            assert got[f"{n}.weight"].dtype == torch.bool and torch.equal(got[f"{n}.weight"], want), (n, k)
            kk = int(k * s_m.numel())
            if kk:
                kth = s_m.flatten().sort(descending=True).values[kk - 1]
                ties += int((s_m == kth).sum()) > kk - int((s_m > kth).sum())
        assert ties > 0  # the rule for ties was exercised
        alone = core.masks_from_norms(model, nm, k)
        for n in layers:
            s_m = w[f"{n}.weight"].abs() * nm[n].float()[None]
            assert torch.equal(alone[f"{n}.weight"], per_matrix(s_m, k)), n


def test_pack_is_numpy_packbits():
    import numpy as np

    m = torch.rand(3, 7) > 0.5  # 21 bits: a partial last byte
    assert select.pack(m).tolist() == np.packbits(m.numpy().reshape(-1)).tolist()


def tied_llama(seed=3):
    return tiny_llama(seed, tie_word_embeddings=True)


def test_unpadded_batches_take_the_plain_causal_path_with_the_masked_values(monkeypatch):
    model = tied_llama()
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, 64, (11,), generator=g) for _ in range(6)]
    other = [torch.randint(0, 64, (11,), generator=g) for _ in range(6)]
    seen = []
    model.register_forward_pre_hook(lambda m, a, kw: seen.append(dict(kw)), with_kwargs=True)
    plain_norms = core.input_norms(model, ids, batch_size=3)
    plain = core.identify(model, ids, other, 0.1, batch_size=3)
    assert seen and all("attention_mask" not in kw and "position_ids" not in kw for kw in seen)
    # the head is tied (not scored): only the last position's logits are computed
    assert core.tied_head(model) is not None and all(kw.get("logits_to_keep") == 1 for kw in seen)
    seen.clear()
    orig = core._forward
    monkeypatch.setattr(core, "_forward", lambda *a, **kw: orig(*a, **{**kw, "plain": False, "skip_head": False}))
    masked_norms = core.input_norms(model, ids, batch_size=3)
    masked = core.identify(model, ids, other, 0.1, batch_size=3)
    assert seen and all("attention_mask" in kw for kw in seen)
    assert plain_norms.keys() == masked_norms.keys()
    assert all(torch.equal(plain_norms[n], masked_norms[n]) for n in plain_norms)
    assert plain.keys() == masked.keys() and all(torch.equal(plain[n], masked[n]) for n in plain)
    assert core.count(plain) > 0


def test_identification_copies_to_the_host_once():
    """The account of identification on a tiny Llama: the norms stay on the device (no copy per
    layer and set), the masks cross once, as bits."""
    model = tiny_llama(seed=3)
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, 64, (11,), generator=g) for _ in range(4)]
    acc, masks = account(core.identify, model, ids[:2], ids[2:], 0.1, batch_size=2, host=ids)
    n_params = sum(m.numel() for m in masks.values())
    assert acc.d2h == 1 and acc.d2h_bytes == (n_params + 7) // 8
    # the reads left: one per forward where transformers checks the ids for a pad token, none of ours
    assert acc.syncs == 1 + acc.sync_ops["_local_scalar_dense"] and acc.sync_ops[".cpu()"] == 1
    assert acc.ops["topk"] == 4  # q/o, k/v, gate/up, down: one call per shape for both sets
