"""Feature clamping inside a tiny random LLaVA: exact edit, positions, error term, hooks restored."""

import numpy as np
import pytest
import torch

from backend.core.interventions import count_hooks
from backend.sae import scenes as S
from backend.sae import steer as ST
from backend.sae import vlm
from backend.sae.sae import TopKSAE

torch.set_num_threads(1)
HOOK = "model.language_model.layers.0:input"
BASE_HOOKS = {}


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    tok = vlm.make_tokenizer()
    model = vlm.make_model(tok, image_size=16, patch_size=4, hidden=16, vision_layers=1, text_layers=2).eval()
    sae = TopKSAE(16, 24, 3)
    with torch.no_grad():
        sae.W_enc.normal_()
    rng = np.random.default_rng(0)
    imgs = np.stack([S.render(S.sample_spec(rng, size=16))[0] for _ in range(2)])
    vlm.generate_captions(model, tok, imgs, max_new_tokens=2)
    BASE_HOOKS[id(model)] = count_hooks(model)  # output-recording hooks transformers installs itself
    return model, tok, sae, imgs


def capture(model, tok, imgs, hook, *, order_after=None):
    return next(vlm.residuals(model, tok, imgs, hook))[1]


def test_clamp_replaces_the_residual_by_the_edited_reconstruction(tiny):
    model, tok, sae, imgs = tiny
    h = capture(model, tok, imgs, HOOK)
    expected = ST.clamp_codes(sae, h, 5, 3.0, add_error=False)
    with ST.clamp_feature(model, sae, HOOK, 5, 3.0, positions="prompt"):
        seen = capture(model, tok, imgs, "model.language_model.layers.0:input")
    torch.testing.assert_close(seen, expected)
    assert count_hooks(model) == BASE_HOOKS[id(model)]


def test_image_positions_mode_leaves_text_positions_alone(tiny):
    model, tok, sae, imgs = tiny
    h = capture(model, tok, imgs, HOOK)
    with ST.clamp_feature(model, sae, HOOK, 2, 4.0, positions="image"):
        seen = capture(model, tok, imgs, HOOK)
    sl = vlm.image_slice(model)
    torch.testing.assert_close(seen[:, : sl.start], h[:, : sl.start])
    torch.testing.assert_close(seen[:, sl.stop :], h[:, sl.stop :])
    assert not torch.allclose(seen[:, sl], h[:, sl])


def test_text_positions_mode_is_the_complement_of_image_mode(tiny):
    model, tok, sae, imgs = tiny
    h = capture(model, tok, imgs, HOOK)
    with ST.clamp_feature(model, sae, HOOK, 2, 4.0, positions="text"):
        seen = capture(model, tok, imgs, HOOK)
    with ST.clamp_feature(model, sae, HOOK, 2, 4.0, positions="prompt"):
        full = capture(model, tok, imgs, HOOK)
    sl = vlm.image_slice(model)
    torch.testing.assert_close(seen[:, sl], h[:, sl])
    torch.testing.assert_close(seen[:, : sl.start], full[:, : sl.start])
    torch.testing.assert_close(seen[:, sl.stop :], full[:, sl.stop :])
    assert not torch.allclose(seen[:, sl.stop :], h[:, sl.stop :])


def test_add_error_term_moves_only_along_the_feature(tiny):
    model, tok, sae, imgs = tiny
    h = capture(model, tok, imgs, HOOK)
    f = 7
    z = sae.encode(h)[..., f]
    out = ST.clamp_codes(sae, h, f, 2.5, add_error=True)
    torch.testing.assert_close(out, h + (2.5 - z).unsqueeze(-1) * sae.W_dec[f], rtol=1e-4, atol=1e-4)


def test_generation_modes_and_hooks_are_removed_even_on_error(tiny):
    model, tok, sae, imgs = tiny
    base = vlm.generate_captions(model, tok, imgs, max_new_tokens=4)
    for mode in ST.POSITION_MODES:
        ST.steered_captions(model, tok, sae, HOOK, imgs, 1, 5.0, positions=mode)
        assert count_hooks(model) == BASE_HOOKS[id(model)]
    assert vlm.generate_captions(model, tok, imgs, max_new_tokens=4) == base
    with pytest.raises(RuntimeError):
        with ST.clamp_feature(model, sae, HOOK, 1, 5.0):
            raise RuntimeError("boom")
    assert count_hooks(model) == BASE_HOOKS[id(model)]
    with pytest.raises(ValueError):
        with ST.clamp_feature(model, sae, HOOK, 1, 5.0, positions="nowhere"):
            pass
    with pytest.raises(IndexError):
        with ST.clamp_feature(model, sae, HOOK, 99, 5.0):
            pass
    assert count_hooks(model) == BASE_HOOKS[id(model)]


def test_hookpoint_names_resolve_like_the_papers(tiny):
    model = tiny[0]
    assert vlm.resolve_hookpoint(model, "model.layers.1") == "model.language_model.layers.1"
    assert vlm.resolve_hookpoint(model, "model.layers.0:input") == "model.language_model.layers.0:input"
    with pytest.raises(KeyError):
        vlm.resolve_hookpoint(model, "model.layers.9")
    with pytest.raises(ValueError):
        vlm.resolve_hookpoint(model, "model.layers.1:sideways")
