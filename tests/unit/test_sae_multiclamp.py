"""Several SAE feature clamps at once (backend.sae.steer.clamp_features) inside a tiny random LLaVA:
one hook, the exact edit, the single clamp unchanged, the model restored exactly (also after an
exception), the lock held, refusals; and the analysis of one image (none, each alone, all together)."""

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from backend.core import bounds
from backend.core.interventions import count_hooks, model_lock
from backend.sae import analysis
from backend.sae import scenes as S
from backend.sae import steer as ST
from backend.sae import vlm
from backend.sae.organism import Organism
from backend.sae.sae import TopKSAE

torch.set_num_threads(1)
HOOK = "model.language_model.layers.0:input"
CLAMPS = [(5, 3.0), (2, 4.0), (11, 1.5)]


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
    vlm.generate_captions(model, tok, imgs, max_new_tokens=2)  # transformers' own hooks, installed once
    return model, tok, sae, imgs, count_hooks(model)


def capture(model, tok, imgs):
    return next(vlm.residuals(model, tok, imgs, HOOK))[1]


def logits(model, tok, imgs):
    ids = vlm.prompt_ids(tok, model, len(imgs))
    with torch.no_grad():
        return model(input_ids=ids, pixel_values=vlm.pixel_values(imgs), attention_mask=torch.ones_like(ids)).logits


def test_the_clamps_and_suppressions_edit_the_reconstruction_together(tiny):
    model, tok, sae, imgs, _ = tiny
    h = capture(model, tok, imgs)
    vals, idx = sae.encode_sparse(h)
    drop = torch.isin(idx, torch.tensor([5, 2, 11, 7]))
    want = sae.decode_sparse(torch.where(drop, 0.0, vals), idx) + sum(v * sae.W_dec[f] for f, v in CLAMPS)
    got = ST.clamp_codes_many(sae, h, CLAMPS, add_error=False, suppress=(7,))
    torch.testing.assert_close(got, want)
    with ST.clamp_features(model, sae, HOOK, CLAMPS, positions="prompt", suppress=[7]):
        seen = capture(model, tok, imgs)
    torch.testing.assert_close(seen, got)


def test_one_clamp_is_the_single_clamp_bit_for_bit(tiny):
    """The single clamp's former formula, written out: the general path gives the same bits, so the
    recorded steering results of the zoo organism stay what they were."""
    model, tok, sae, imgs, _ = tiny
    h = capture(model, tok, imgs)
    vals, idx = sae.encode_sparse(h)
    for g in (5, 7, 9):
        vals = torch.where(idx == g, torch.zeros_like(vals), vals)
    old = (sae.decode_sparse(vals, idx) + 3.0 * sae.W_dec[5]).to(h.dtype)
    assert torch.equal(ST.clamp_codes(sae, h, 5, 3.0, add_error=False, suppress=(7, 9)), old)
    assert torch.equal(ST.clamp_codes_many(sae, h, [(5, 3.0)], False, (7, 9)), old)
    one = ST.steered_captions(model, tok, sae, HOOK, imgs, 5, 3.0, positions="image")
    assert ST.captions_with_clamps(model, tok, sae, HOOK, imgs, [(5, 3.0)], positions="image") == one


def test_one_hook_the_lock_held_and_the_model_restored_exactly(tiny):
    model, tok, sae, imgs, base_hooks = tiny
    state = {k: v.clone() for k, v in model.state_dict().items()}
    before = logits(model, tok, imgs)
    held = []
    with ST.clamp_features(model, sae, HOOK, CLAMPS, positions="image", suppress=[7, 8]):
        assert count_hooks(model) == base_hooks + 1  # every clamp in the one hook
        steered = logits(model, tok, imgs)
        t = threading.Thread(target=lambda: held.append(not model_lock(model).acquire(blocking=False)))
        t.start()
        t.join()
    assert held == [True]  # another request waits while the clamps are in
    assert not torch.equal(steered, before)
    assert count_hooks(model) == base_hooks and torch.equal(logits(model, tok, imgs), before)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    with pytest.raises(RuntimeError, match="boom"):
        with ST.clamp_features(model, sae, HOOK, CLAMPS):
            logits(model, tok, imgs)
            raise RuntimeError("boom")
    assert count_hooks(model) == base_hooks and torch.equal(logits(model, tok, imgs), before)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert model_lock(model).acquire(blocking=False)
    model_lock(model).release()


@pytest.mark.parametrize(
    "clamps, suppress, words",
    [
        ([], (), "The number of clamped features must be a whole number between 1 and 8"),
        ([(i, 1.0) for i in range(9)], (), "between 1 and 8 (got 9)"),
        ([(24, 1.0)], (), "feature 24 is not in this SAE: features are 0..23"),
        ([(-1, 1.0)], (), "feature -1 is not in this SAE"),
        ([(2.5, 1.0)], (), "a feature is a whole number in 0..23"),
        ([(True, 1.0)], (), "a feature is a whole number"),
        ([(3, float("nan"))], (), "clamp value of feature 3 must be a finite number"),
        ([(3, "x")], (), "clamp value of feature 3 must be a number"),
        ([(3, 1.0), (3, 2.0)], (), "feature 3 is clamped twice"),
        ([(3, 1.0)], (3,), "feature 3 is both clamped and suppressed"),
        ([(3, 1.0)], (30,), "feature 30 is not in this SAE"),
        ([3, 1.0], (), "pairs"),
    ],
)
def test_bad_clamps_are_refused_with_a_message_and_leave_no_hook(tiny, clamps, suppress, words):
    model, tok, sae, imgs, base_hooks = tiny
    with pytest.raises(ValueError) as e:
        with ST.clamp_features(model, sae, HOOK, clamps, suppress=suppress):
            pass
    assert words in str(e.value)
    assert count_hooks(model) == base_hooks


def test_values_outside_the_clamp_range_and_too_many_suppressions_are_refused():
    r = bounds.Range("The clamp value", 0, 50, whole=False)
    with pytest.raises(ValueError, match="The clamp value of feature 2 must be between 0 and 50"):
        ST.check_clamps([(1, 3.0), (2, 60.0)], 24, values=r)
    with pytest.raises(ValueError, match="The number of suppressed features"):
        ST.check_clamps([(1, 3.0)], 1000, suppress=range(2, 300))
    assert ST.check_clamps([(np.int64(1), 3), (2.0, 1)], 24, suppress=[4, 4, 5]) == ([(1, 3.0), (2, 1.0)], (4, 5))
    with pytest.raises(IndexError):  # what the single clamp raised before, still
        ST.check_clamps([(24, 1.0)], 24)


def test_caption_verdicts():
    assert ST.changed_attributes("a plain red circle top left", "a plain blue square top left") == ["colour", "shape"]
    assert ST.changed_attributes("a plain red circle top left", "a plain red circle top right") == ["position"]
    assert ST.changed_attributes("a plain red circle top left", "a plain red circle top left") == []
    one, two = "a plain green circle top left", "a plain green circle top left and a plain blue triangle top right"
    assert ST.changed_attributes(one, two) == ["object added"]
    assert ST.changed_attributes(two, one) == ["object removed"]
    assert ST.changed_attributes(two, "a plain red circle top left") == ["colour", "object removed"]
    assert ST.changed_attributes("a plain red circle top left", "red red") is None
    assert ST.concepts_named("a striped red circle top left and a plain blue square bottom right") == [
        "red",
        "blue",
        "circle",
        "square",
        "plain",
        "striped",
        "top left",
        "bottom right",
    ]
    assert ST.concepts_named("circle circle") == []


@pytest.fixture(scope="module")
def tiny_org(tiny):
    model, tok, sae, imgs, _ = tiny
    labels = {
        "5": {"label": "red", "family": "colour", "score": 0.9},
        "6": {"label": "blue", "family": "colour", "score": 0.9},
        "2": {"label": "circle", "family": "shape", "score": 0.7},
    }
    return Organism(
        "tiny",
        Path("."),
        model=model,
        tokenizer=tok,
        sae=sae,
        hookpoint=HOOK,
        labels=labels,
        model_id="tiny-multiclamp",
        sae_info={"n_latents": 24},
        vision={"image_size": 16, "patch_size": 4, "anyres": False},
    )


def test_the_combination_gives_none_each_alone_and_all_together(tiny, tiny_org):
    model, tok, sae, imgs, base_hooks = tiny
    img = imgs[0]
    out = analysis.steer_combination(tiny_org, img, [(5, 3.0), (2, 4.0)], suppress=[9], positions="image")
    kw = {"positions": "image", "suppress": (9,)}
    assert out["baseline"]["caption"] == vlm.generate_captions(model, tok, img[None])[0]
    assert [a["caption"] for a in out["alone"]] == [
        ST.captions_with_clamps(model, tok, sae, HOOK, img[None], [c], **kw)[0] for c in [(5, 3.0), (2, 4.0)]
    ]
    assert (
        out["together"]["caption"]
        == ST.captions_with_clamps(model, tok, sae, HOOK, img[None], [(5, 3.0), (2, 4.0)], **kw)[0]
    )
    assert [c["concept"] for c in out["clamps"]] == ["red", "circle"] and out["suppressed"] == [9]
    assert set(out["together"]["names_concept"]) == {"5", "2"} and set(out["alone"][0]["names_concept"]) == {"5"}
    assert out["baseline"]["changed"] is None and count_hooks(model) == base_hooks
    many = analysis.steer_caption_many(tiny_org, img, [(5, 3.0), (2, 4.0)], suppress=[9], positions="image")
    assert many["together"]["caption"] == out["together"]["caption"] and "alone" not in many


def test_the_analysis_checks_against_the_organism(tiny_org):
    img = np.zeros((16, 16, 3), np.uint8)
    with pytest.raises(ValueError, match="The clamp value of feature 5 must be between 0 and 100"):
        analysis.steer_combination(tiny_org, img, [(5, 300.0)])
    with pytest.raises(ValueError, match="positions must be one of"):
        analysis.steer_combination(tiny_org, img, [(5, 3.0)], positions="nowhere")
    # family rivals are suppressed, never a clamped feature: red and blue clamped together
    clamps, sup = analysis.check_steering(tiny_org, [(5, 3.0)], suppress_family=True)
    assert sup == (6,)
    clamps, sup = analysis.check_steering(tiny_org, [(5, 3.0), (6, 2.0)], suppress_family=True)
    assert sup == ()


def test_active_positions_edit_only_the_image_patches_where_the_features_fire(tiny):
    """ "active": the clamp is written at the image positions where a clamped or suppressed feature is
    among the codes at or above its floor, and nowhere else (not the text, not the other patches)."""
    model, tok, sae, imgs, _ = tiny
    h = capture(model, tok, imgs)
    sl = vlm.image_slice(model)
    with torch.no_grad():  # the tiny SAE's weights take gradients; the floor is a plain number
        vals, idx = sae.encode_sparse(h)
    feats = [5, 2, 11, 7]
    floor = torch.full((sae.n_latents,), float(vals.median()))
    on = (torch.isin(idx, torch.tensor(feats)) & (vals >= floor[idx]) & (vals > 0)).any(-1)
    on[:, : sl.start] = False
    on[:, sl.stop :] = False
    assert 0 < int(on.sum()) < on[:, sl].numel()  # some patches, not all: the test can tell
    want = h.clone()
    want[on] = ST.clamp_codes_many(sae, h, CLAMPS, add_error=False, suppress=(7,))[on]
    with ST.clamp_features(model, sae, HOOK, CLAMPS, positions="active", suppress=[7], floor=floor):
        seen = capture(model, tok, imgs)
    torch.testing.assert_close(seen, want)
    # without a floor any activation counts: at least as many patches are edited
    with ST.clamp_features(model, sae, HOOK, CLAMPS, positions="active", suppress=[7]):
        loose = capture(model, tok, imgs)
    assert int((loose != h).any(-1).sum()) >= int((seen != h).any(-1).sum())
