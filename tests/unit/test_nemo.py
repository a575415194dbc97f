"""NeMo backend on tiny random Stable Diffusion pipelines (built from the zoo recipe's configs)."""
import json

import numpy as np
import pytest
import torch

from backend import nemo
from backend.core.interventions import count_hooks, scale_weights

torch.set_num_threads(1)


def tiny_pipe(seed: int = 0):
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel

    from backend.zoo.recipes import memorization as rec

    tok = rec.make_tokenizer()
    torch.manual_seed(seed)
    te = CLIPTextModel(rec.text_config(len(tok), tok.eos_token_id, tok.bos_token_id)).eval()
    vae = AutoencoderKL(**rec.vae_config()).eval()
    unet = UNet2DConditionModel(**rec.unet_config()).eval()
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=tok, unet=unet,
                                   scheduler=DDIMScheduler(**rec.scheduler_config()),
                                   safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="module")
def pipe():
    return tiny_pipe()


PROMPT = "a red circle and a blue ring on a yellow background"

# Stable Diffusion 1.4's UNet config (CompVis/stable-diffusion-v1-4, unet/config.json).
SD14_UNET = {
    "_class_name": "UNet2DConditionModel", "act_fn": "silu", "attention_head_dim": 8,
    "block_out_channels": [320, 640, 1280, 1280], "center_input_sample": False,
    "cross_attention_dim": 768,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
                         "DownBlock2D"],
    "downsample_padding": 1, "flip_sin_to_cos": True, "freq_shift": 0, "in_channels": 4,
    "layers_per_block": 2, "mid_block_scale_factor": 1, "norm_eps": 1e-05, "norm_num_groups": 32,
    "out_channels": 4, "sample_size": 64,
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
}


def test_layer_discovery_on_sd14_config(tmp_path):
    from diffusers import UNet2DConditionModel

    (tmp_path / "config.json").write_text(json.dumps(SD14_UNET))
    config = UNet2DConditionModel.load_config(tmp_path)
    with torch.device("meta"):
        unet = UNet2DConditionModel.from_config(config)
    layers = nemo.value_layers(unet)
    sizes = nemo.layer_sizes(unet)
    assert len(layers) == 7
    assert sum(sizes.values()) == 5760
    assert [sizes[n] for n in layers] == [320, 320, 640, 640, 1280, 1280, 1280]
    assert layers[-1].startswith("mid_block.")
    assert not any("up_blocks" in n for n in layers)
    assert [nemo.short_name(n) for n in layers][:2] == ["down0.attn0", "down0.attn1"]


def test_layer_discovery_on_tiny(pipe):
    layers = nemo.value_layers(pipe.unet)
    assert [nemo.short_name(n) for n in layers] == ["down0.attn0", "down1.attn0", "mid.attn0"]
    assert list(nemo.layer_sizes(pipe.unet).values()) == [32, 64, 64]


def test_deactivate_zeroes_both_cfg_halves_and_restores(pipe):
    unet = pipe.unet
    name = nemo.value_layers(unet)[1]
    emb = nemo.encode_prompts(pipe, ["", PROMPT])  # [uncond, cond] as one CFG batch
    x = torch.randn(2, unet.config.in_channels, 8, 8, generator=torch.Generator().manual_seed(0))
    seen = []
    h = unet.get_submodule(name).register_forward_hook(lambda m, i, o: seen.append(o.detach().clone()))
    try:
        with torch.no_grad():
            ref = unet(x, 500, encoder_hidden_states=emb).sample
            with nemo.deactivate(unet, {name: [3, 7]}):
                out = unet(x, 500, encoder_hidden_states=emb).sample
            after = unet(x, 500, encoder_hidden_states=emb).sample
    finally:
        h.remove()
    # the probe hook was registered first, so it sees the raw output; recompute the edited one
    with torch.no_grad(), nemo.deactivate(unet, {name: [3, 7]}):
        v = unet.get_submodule(name)(emb)
    assert torch.all(v[:, :, [3, 7]] == 0)          # both halves of the batch
    assert torch.equal(v[:, :, 0], seen[0][:, :, 0])
    assert not torch.allclose(out, ref)
    assert torch.equal(after, ref)                  # exact restore
    assert count_hooks(unet) == 0


def test_deactivate_restores_after_exception_and_validates(pipe):
    unet = pipe.unet
    name = nemo.value_layers(unet)[0]
    with pytest.raises(RuntimeError):
        with nemo.deactivate(unet, {name: [0]}):
            raise RuntimeError("boom")
    assert count_hooks(unet) == 0
    with pytest.raises(ValueError, match="out of range"):
        with nemo.deactivate(unet, {name: [32]}):
            pass
    with pytest.raises(ValueError, match="not a down/mid-block"):
        with nemo.deactivate(unet, {"up_blocks.0.attentions.0.transformer_blocks.0.attn2.to_v": [0]}):
            pass
    assert count_hooks(unet) == 0


def test_deactivation_acts_at_every_step_like_zeroed_weights(pipe):
    """Zeroing a channel of to_v's output at every step = zeroing that row of its weight."""
    unet = pipe.unet
    spec = {nemo.value_layers(unet)[0]: [1, 5], nemo.value_layers(unet)[2]: [10]}
    hooked = nemo.generate(pipe, PROMPT, [0, 1], guidance_scale=3.0, num_inference_steps=4, spec=spec)
    masks = {}
    for name, chans in spec.items():
        w = unet.get_submodule(name).weight
        m = torch.zeros_like(w, dtype=torch.bool)
        m[chans] = True
        masks[name + ".weight"] = m
    with scale_weights(unet, masks, 0.0):
        pruned = nemo.generate(pipe, PROMPT, [0, 1], guidance_scale=3.0, num_inference_steps=4)
    plain = nemo.generate(pipe, PROMPT, [0, 1], guidance_scale=3.0, num_inference_steps=4)
    np.testing.assert_allclose(hooked, pruned, atol=1e-5)
    assert np.abs(hooked - plain).max() > 1e-4


def test_activations_match_a_hooked_unet_forward(pipe):
    unet = pipe.unet
    acts = nemo.activations(pipe, [PROMPT, "a green cross on a white background"])
    name = nemo.value_layers(unet)[2]
    captured = []
    h = unet.get_submodule(name).register_forward_hook(lambda m, i, o: captured.append(o.detach()))
    try:
        with torch.no_grad():
            emb = nemo.encode_prompts(pipe, [PROMPT])
            unet(torch.randn(1, unet.config.in_channels, 8, 8), 900, encoder_hidden_states=emb)
    finally:
        h.remove()
    torch.testing.assert_close(acts[name][0], captured[0][0].abs().mean(0))
    assert acts[name].shape == (2, 64)


def test_stats_and_zscores(pipe):
    prompts = ["a red circle on a blue background", "a white square on a black background",
               "a green ring and a purple cross on a yellow background", "a blue triangle on a red background"]
    stats = nemo.neuron_stats(pipe, prompts)
    acts = nemo.activations(pipe, [PROMPT])
    z = nemo.zscores({k: v[0] for k, v in acts.items()}, stats)
    for n in nemo.value_layers(pipe.unet):
        expect = (acts[n][0] - stats.mean[n]).abs() / stats.std[n]
        torch.testing.assert_close(z[n], expect)
        assert torch.all(z[n] >= 0)
    json.dumps(stats.to_json())


def test_ssim_properties():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(3, 4, 8, 8, generator=g)
    b = torch.rand(3, 4, 8, 8, generator=g)
    torch.testing.assert_close(nemo.ssim(a, a), torch.ones(3))
    torch.testing.assert_close(nemo.ssim(a, b), nemo.ssim(b, a))
    assert torch.all(nemo.ssim(a, b) < 0.5)
    assert torch.all(nemo.ssim(a, (a + 0.05 * b).clamp(0, 1)) > 0.9)
    n = nemo.minmax_per_channel(torch.randn(2, 4, 8, 8) * 5)
    assert n.amin().item() == 0.0 and abs(n.amax().item() - 1.0) < 1e-6
    assert nemo.pairwise_ssim(a).shape == (3,)
    imgs = np.random.default_rng(0).random((4, 32, 32, 3)).astype(np.float32)
    assert nemo.diversity(np.repeat(imgs[:1], 3, 0)) == pytest.approx(0.0, abs=1e-6)
    assert nemo.diversity(imgs) > 0.8
    assert nemo.auroc([3, 4], [1, 2]) == 1.0 and nemo.auroc([1], [1]) == 0.5


def test_noise_differences_and_score(pipe):
    d = nemo.noise_differences(pipe, PROMPT, [0, 1, 2], guidance_scale=4.0)
    assert d.shape == (3, pipe.unet.config.in_channels, 8, 8)
    assert d.amin() >= 0 and d.amax() <= 1 + 1e-6
    s1 = nemo.memorization_score(pipe, PROMPT, num_seeds=3, guidance_scale=4.0)
    s2 = nemo.memorization_score(pipe, PROMPT, num_seeds=3, guidance_scale=4.0)
    assert s1 == s2 and -1 <= s1 <= 1
    # a blocked run differs from the vanilla one, and leaves nothing behind
    spec = {nemo.value_layers(pipe.unet)[1]: list(range(64))}
    d2 = nemo.noise_differences(pipe, PROMPT, [0, 1, 2], guidance_scale=4.0, spec=spec)
    assert not torch.allclose(d, d2)
    assert count_hooks(pipe.unet) == 0


def test_noise_difference_is_the_first_prediction_from_the_initial_noise(pipe):
    """Official definition: ε_θ(x_T, t₁, y) − x_T, t₁ the second timestep of a 50-step DDIM
    schedule, with no scheduler step in between (x_T itself, not x_{t₁})."""
    from diffusers import DDIMScheduler

    unet = pipe.unet
    sched = DDIMScheduler.from_config(pipe.scheduler.config)
    sched.set_timesteps(50)
    t0, t1 = sched.timesteps[0], sched.timesteps[1]
    x_T = nemo.initial_latents(pipe, [0, 1])
    cond = nemo.encode_prompts(pipe, [PROMPT]).expand(2, -1, -1)
    with torch.no_grad():
        eps1 = unet(x_T, t1, encoder_hidden_states=cond).sample
        eps0 = unet(x_T, t0, encoder_hidden_states=cond).sample
        stepped = sched.step(eps0, t0, x_T).prev_sample
        eps_stepped = unet(stepped, t1, encoder_hidden_states=cond).sample
    got = nemo.noise_differences(pipe, PROMPT, [0, 1], guidance_scale=0)
    torch.testing.assert_close(got, nemo.minmax_per_channel(eps1 - x_T), atol=1e-5, rtol=1e-5)
    # the earlier variant (one DDIM step first) is a different quantity
    assert (got - nemo.minmax_per_channel(eps_stepped - stepped)).abs().max() > 1e-3


def test_guidance_is_standard_cfg(pipe):
    """[uncond, cond] read back in that order: guidance 1 is the conditional prediction alone (the
    official code's swapped halves would give the unconditional one), guidance 0 skips the
    unconditional pass."""
    unet = pipe.unet
    g0 = nemo.noise_differences(pipe, PROMPT, [0, 1], guidance_scale=0)
    g1 = nemo.noise_differences(pipe, PROMPT, [0, 1], guidance_scale=1.0)
    torch.testing.assert_close(g0, g1, atol=1e-4, rtol=1e-4)
    g3 = nemo.noise_differences(pipe, PROMPT, [0, 1], guidance_scale=3.0)
    from diffusers import DDIMScheduler

    sched = DDIMScheduler.from_config(pipe.scheduler.config)
    sched.set_timesteps(50)
    t1 = sched.timesteps[1]
    x = nemo.initial_latents(pipe, [0, 1])
    with torch.no_grad():
        e_c = unet(x, t1, encoder_hidden_states=nemo.encode_prompts(pipe, [PROMPT]).expand(2, -1, -1)).sample
        e_u = unet(x, t1, encoder_hidden_states=nemo.encode_prompts(pipe, [""]).expand(2, -1, -1)).sample
    torch.testing.assert_close(g3, nemo.minmax_per_channel(e_u + 3.0 * (e_c - e_u) - x), atol=1e-4, rtol=1e-4)
    swapped = nemo.minmax_per_channel(e_c + 3.0 * (e_u - e_c) - x)
    assert (g3 - swapped).abs().max() > 1e-2


def test_seed_agreement_and_seed_filter(pipe):
    from backend.nemo.evaluate import Checker

    d = nemo.noise_differences(pipe, PROMPT, range(4), guidance_scale=0)
    agree = nemo.seed_agreement(d)
    for i in range(4):  # brute force: the best partner of each seed
        best = max(float(nemo.ssim(d[i:i + 1], d[j:j + 1])) for j in range(4) if j != i)
        assert agree[i].item() == pytest.approx(best, abs=1e-6)
    order = agree.argsort()
    cut = float(agree[order[1]] + agree[order[2]]) / 2  # drops exactly the two least agreeing seeds
    ch = Checker(pipe, PROMPT, range(4), 0.0, cut)
    assert ch.seeds == sorted(int(i) for i in order[2:])
    torch.testing.assert_close(ch.vanilla, d[sorted(order[2:].tolist())])
    # nothing above the threshold: the prompt is skipped with no neurons and one evaluation
    stats = nemo.neuron_stats(pipe, ["a red circle on a blue background", "a white square on a black background",
                                     "a green ring on a yellow background"])
    loc = nemo.localize(pipe, PROMPT, stats, theta_mem=float(agree.max()) + 1e-3, num_seeds=4)
    assert loc.skipped and not loc.found and loc.neurons == {} and loc.evaluations == 1
    assert loc.seeds == [0, 1, 2, 3] and loc.seeds_kept == []
    assert loc.to_json()["skipped"] is True


class FakeChecker:
    """Memorization is removed exactly when every neuron of `needed` is off; each other neuron
    switched off nudges the similarity up by `noise` (as useless neurons do, a little)."""

    def __init__(self, needed, theta_mem=0.5, removed=0.1, kept=0.9, noise=0.0):
        self.needed, self.theta_mem, self.calls = needed, theta_mem, 0
        self.removed, self.kept, self.noise = removed, kept, noise

    def similarity(self, spec):
        self.calls += 1
        ok = all(c in spec.get(layer, []) for layer, c in self.needed)
        extra = nemo.count(spec) - (len(self.needed) if ok else 0)
        return (self.removed if ok else self.kept) + self.noise * extra


def test_refinement_keeps_exactly_what_is_needed(pipe):
    layers = nemo.value_layers(pipe.unet)
    needed = [(layers[0], 4), (layers[2], 9)]
    initial = {layers[0]: [1, 4, 6], layers[1]: [0, 2, 3], layers[2]: [9, 11]}
    out = nemo.refine(initial, FakeChecker(needed))
    assert out == {layers[0]: [4], layers[2]: [9]}


class ConditionChecker:
    """A fake checker whose similarity is low exactly when `condition(switched-off set)` holds."""

    def __init__(self, condition, theta_mem=0.5):
        self.condition, self.theta_mem, self.calls = condition, theta_mem, 0

    def similarity(self, spec):
        self.calls += 1
        return 0.1 if self.condition({(n, c) for n, cs in spec.items() for c in cs}) else 0.9


def _stats_with_outliers(acts, outliers):
    """Statistics under which the prompt's z-score is 0 everywhere except 10 at `outliers`."""
    mean = {n: v[0].clone() for n, v in acts.items()}
    for n, c in outliers:
        mean[n][c] -= 10.0
    return nemo.NeuronStats(mean, {n: torch.ones_like(v) for n, v in mean.items()}, 1)


def test_initial_selection_keeps_the_official_order_once_each(pipe):
    layer = nemo.value_layers(pipe.unet)[1]
    acts = nemo.activations(pipe, [PROMPT])
    ranked = acts[layer][0].argsort(descending=True).tolist()
    t1, t2, t3 = ranked[:3]
    others = sorted(set(range(len(ranked))) - {t1, t2, t3})
    # outliers: the second neuron by activation (top-k picks it too) and the first and last others
    outliers = sorted({others[0], t2, others[-1]})
    stats = _stats_with_outliers(acts, [(layer, c) for c in outliers])
    # memorization is removed only once the three top neurons are off: k reaches 3
    checker = ConditionChecker(lambda off: {(layer, t1), (layer, t2), (layer, t3)} <= off)
    spec, theta, k, found, _ = nemo.initial_selection(pipe, PROMPT, stats, checker)
    assert found and k == 3
    # z-outliers by channel index, then the top-k by activation; t2 once, where it came first
    assert spec[layer] == outliers + [t1, t3]


def test_refined_set_follows_the_official_order(pipe):
    """The refinement's result depends on the order it tries the neurons in: with 'o or t1 off'
    and t2 needed, the official order [o, t1, t2] lets o go first and keeps t1; the list sorted by
    channel (o > t1) would let t1 go first and keep o."""
    layer = nemo.value_layers(pipe.unet)[1]
    acts = nemo.activations(pipe, [PROMPT])
    ranked = acts[layer][0].argsort(descending=True).tolist()
    t1, t2 = ranked[:2]
    o = max(set(range(len(ranked))) - {t1, t2})
    if o < t1:  # the test needs an outlier past the top neuron's channel
        pytest.skip("top neuron is the layer's last channel")
    stats = _stats_with_outliers(acts, [(layer, o)])

    def memorization_removed(off):
        return (layer, t2) in off and bool({(layer, o), (layer, t1)} & off)

    checker = ConditionChecker(memorization_removed)
    spec, theta, k, found, thr = nemo.initial_selection(pipe, PROMPT, stats, checker)
    assert found and k == 2
    assert nemo.refine(spec, checker, thr) == {layer: [t1, t2]}
    assert spec[layer] == [o, t1, t2]


def test_initial_selection_schedule(pipe):
    layers = nemo.value_layers(pipe.unet)
    stats = nemo.neuron_stats(pipe, ["a red circle on a blue background", "a white square on a black background",
                                     "a green ring on a yellow background"])
    acts = nemo.activations(pipe, [PROMPT])
    top = int(acts[layers[1]][0].argsort(descending=True)[2])  # third-highest in layer 1
    hist = []
    spec, theta, k, found, thr = nemo.initial_selection(pipe, PROMPT, stats, FakeChecker([(layers[1], top)]),
                                                        history=hist)
    assert found and thr == 0.5
    assert top in spec[layers[1]]
    assert [h["theta"] for h in hist][:3] == [5.0, 4.75, 4.5]
    assert [h["k"] for h in hist][:3] == [0, 1, 2]
    assert k <= 3 and theta == 5.0 - 0.25 * k


def test_search_stops_at_theta_one_and_refines_against_the_last_ssim(pipe):
    """Official stop: θ falls only while above 1; once it reaches 1 (k = 16) the search ends on the
    last selection tried (θ = 1.25, k = 15) and the refinement runs anyway, against that selection's
    SSIM, so a prompt the threshold is never reached for still gets its neurons."""
    layers = nemo.value_layers(pipe.unet)
    stats = nemo.neuron_stats(pipe, ["a red circle on a blue background", "a white square on a black background",
                                     "a green ring on a yellow background"])
    acts = nemo.activations(pipe, [PROMPT])
    top = int(acts[layers[2]][0].argsort(descending=True)[5])  # in the selection from k = 6 on
    # the needed neuron lowers the SSIM, but never to θ_mem
    checker = FakeChecker([(layers[2], top)], theta_mem=0.5, removed=0.7, kept=0.9, noise=1e-4)
    hist = []
    spec, theta, k, found, thr = nemo.initial_selection(pipe, PROMPT, stats, checker, history=hist)
    assert not found
    assert (theta, k) == (1.25, 15) and len(hist) == 16
    assert [h["theta"] for h in hist][-2:] == [1.5, 1.25] and min(h["theta"] for h in hist) > 1
    assert thr == pytest.approx(hist[-1]["ssim"], abs=1e-4) and thr > checker.theta_mem
    refined = nemo.refine(spec, checker, thr)
    assert refined == {layers[2]: [top]}


def test_localize_end_to_end_on_random_model(pipe):
    """A random model's noise differences barely move when neurons are off: the search runs to
    θ = 1 and the relaxed refinement still returns the neurons that lower the SSIM most."""
    stats = nemo.neuron_stats(pipe, ["a red circle on a blue background", "a white square on a black background",
                                     "a green ring on a yellow background", "a black cross on a white background"])
    van = nemo.noise_differences(pipe, PROMPT, range(3), guidance_scale=0)
    theta_mem = float(nemo.seed_agreement(van).min()) - 1e-3  # every seed kept
    loc = nemo.localize(pipe, PROMPT, stats, theta_mem=theta_mem, num_seeds=3)
    assert loc.guidance_scale == nemo.SEARCH_GUIDANCE == 0.0
    assert loc.seeds_kept == [0, 1, 2] and not loc.skipped
    assert loc.relaxed and (loc.theta, loc.k) == (1.25, 15)
    assert 0 < loc.n_neurons <= nemo.count(loc.initial)
    blk = nemo.noise_differences(pipe, PROMPT, range(3), guidance_scale=0, spec=loc.neurons)
    assert float(nemo.ssim(van, blk).max()) < loc.threshold
    j = loc.to_json()
    json.dumps(j)
    assert j["relaxed"] and j["guidance_scale"] == 0.0
    assert count_hooks(pipe.unet) == 0


def test_random_like(pipe):
    layers = nemo.value_layers(pipe.unet)
    spec = {layers[0]: [1, 2], layers[2]: [5]}
    rnd = nemo.random_like(pipe.unet, spec, seed=3)
    assert {k: len(v) for k, v in rnd.items()} == {layers[0]: 2, layers[2]: 1}
    assert not set(rnd[layers[0]]) & {1, 2}


def test_pipeline_loader_and_presets(pipe, tmp_path):
    from backend.core.presets import PresetError, presets
    from backend.nemo.presets import load_pipeline

    hub = [p for p in presets("memorization") if p.source == "hub"]
    assert hub and hub[0].path_or_id == "CompVis/stable-diffusion-v1-4"
    assert hub[0].model_class == "diffusers.StableDiffusionPipeline"
    assert any(p.source == "zoo" and p.path_or_id == "sd-memo" for p in presets("memorization"))
    pipe.save_pretrained(tmp_path / "tiny-sd", safe_serialization=True)
    loaded = load_pipeline(tmp_path / "tiny-sd", roots=[tmp_path])
    assert type(loaded.scheduler).__name__ == "DDIMScheduler"
    assert loaded.scheduler.config.steps_offset == 1
    a = nemo.generate(pipe, PROMPT, [0], guidance_scale=3.0, num_inference_steps=3)
    b = nemo.generate(loaded, PROMPT, [0], guidance_scale=3.0, num_inference_steps=3)
    np.testing.assert_allclose(a, b, atol=1e-6)
    with pytest.raises(PresetError):
        load_pipeline(tmp_path / "tiny-sd", roots=[tmp_path / "elsewhere"])


def test_service_neuron_parsing_and_alignment(pipe):
    from backend.core.presets import Preset
    from backend.nemo import service
    from backend.zoo.recipes import memorization as rec

    m = service.MemoModel(preset=Preset("memorization", "zoo", "x", "diffusers.StableDiffusionPipeline"),
                          pipe=pipe, folder=None, info={}, theta_mem=0.5, guidance_scale=4.0,
                          num_seeds=3, num_inference_steps=4)
    layers = m.layers
    spec = service.parse_neurons(m, "down1.attn0:5, mid.attn0:3 L0:2 down1.attn0:5")
    assert spec == {layers[1]: [5], layers[2]: [3], layers[0]: [2]}
    assert service.spec_labels({layers[1]: [5]}) == ["down1.attn0:5"]
    for bad in ["down9.attn0:1", "mid.attn0:x", "mid.attn0:999", "nocolon"]:
        with pytest.raises(ValueError):
            service.parse_neurons(m, bad)
    rng = np.random.default_rng(0)
    objs, bg = [("red", "circle"), ("white", "square")], "blue"
    img = rec.draw_scene(objs, bg, rng)
    assert service.alignment(img, rec.caption_of(objs, bg)) == 1.0
    assert service.alignment(img, "a green ring on a yellow background") == 0.0
    assert service.alignment(img, "a photo of a dog") is None
    with pytest.raises(ValueError):
        service.clean_prompt("   ")


def test_standin_tokenizer_is_clip_format(tmp_path):
    """The SD-1.4 stand-in's tokenizer/ holds CLIP's four files: byte-level BPE with `</w>` word ends,
    English words as whole tokens, the two specials last, 77 positions, lower-casing."""
    from transformers import CLIPTokenizer

    from tests.helpers.standins.memorization import bytes_to_unicode, write_tokenizer

    write_tokenizer(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merges.txt", "special_tokens_map.json",
                                                         "tokenizer_config.json", "vocab.json"]
    vocab = json.loads((tmp_path / "vocab.json").read_text(encoding="utf-8"))
    units = list(bytes_to_unicode().values())
    assert list(vocab)[:512] == units + [u + "</w>" for u in units]
    assert list(vocab)[-2:] == ["<|startoftext|>", "<|endoftext|>"] and len(vocab) > 2000
    assert (tmp_path / "merges.txt").read_text(encoding="utf-8").startswith("#version: 0.2\n")
    tok = CLIPTokenizer.from_pretrained(tmp_path)
    assert tok.model_max_length == 77
    assert tok.tokenize("A man riding a Horse on the beach") == [
        "a</w>", "man</w>", "riding</w>", "a</w>", "horse</w>", "on</w>", "the</w>", "beach</w>"]
    ids = tok("a dog").input_ids
    assert ids[0] == vocab["<|startoftext|>"] and ids[-1] == vocab["<|endoftext|>"] == max(vocab.values())


# ----------------------------------------------------------------------------- the tab's rendering

def fake_compare(n_seeds=3, neurons=("mid.attn0:1", "down0.attn0:2"), size=16, seed=0):
    """What service.compare returns, with random images (the tab's rendering needs nothing else)."""
    rng = np.random.default_rng(seed)
    on = rng.random((n_seeds, size, size, 3)).astype(np.float32)
    off = on if not neurons else rng.random((n_seeds, size, size, 3)).astype(np.float32)
    ss_on, ss_off = rng.random(n_seeds).tolist(), rng.random(n_seeds).tolist()
    return {"prompt": PROMPT, "seeds": list(range(n_seeds)), "neurons": list(neurons),
            "n_neurons": len(neurons), "theta_mem": 0.5, "images_on": on, "images_off": off,
            "ssim_on": ss_on, "ssim_off": ss_off if neurons else ss_on, "diversity_on": 0.2,
            "diversity_off": 0.6 if neurons else 0.2, "alignment_on": 1.0, "alignment_off": 0.5,
            "score_on": 0.7, "score_off": 0.3 if neurons else 0.7,
            "train_image": rng.random((size, size, 3)).astype(np.float32), "reference_kind": "training image"}


def test_export_draws_an_off_row_only_when_neurons_are_off():
    import matplotlib.pyplot as plt

    from components import memorization_figures as tab

    def titles(c):
        fig = tab.export_figure(c, None, None)
        out = [ax.get_title() for ax in fig.axes] + [t.get_text() for t in fig.texts]
        plt.close(fig)
        return out

    with_off = titles(fake_compare(neurons=("mid.attn0:1",)))
    heads = [t.split("\n")[0] for t in with_off if t.startswith("seed")]
    assert sum(h.endswith(" off") for h in heads) == 3 and sum(h.endswith(" on") for h in heads) == 3
    none_off = titles(fake_compare(neurons=()))
    assert not any(t.startswith("seed") and "off" in t for t in none_off)
    assert sum(t.startswith("seed") for t in none_off) == 3 and tab.NO_NEURONS_OFF in none_off


def test_grid_rows_are_on_and_off_columns_are_seeds():
    from components import memorization_figures as tab

    c = fake_compare(n_seeds=3, neurons=("mid.attn0:1",))
    h = tab.grid_html(c)
    assert h.count("data-row='on' data-seed=") == 3 and h.count("data-row='off' data-seed=") == 3
    assert h.index("data-row='on' data-seed='2'") < h.index("data-row='off' data-seed='0'")
    assert "class='memo-ref'" in h and "grid-row:1 / span 3" in h
    # exact values on hover
    assert f"SSIM to the training image {c['ssim_off'][1]:.4f}" in h
    none = tab.grid_html(fake_compare(n_seeds=2, neurons=()))
    assert "data-row='off' data-seed" not in none and tab.NO_NEURONS_OFF in none
    assert "no neurons off" in none
    # a hub-sized image is shrunk for the grid
    big = fake_compare(n_seeds=1, size=512)
    uri = tab._data_uri(big["images_on"][0])
    import base64
    import io

    from PIL import Image

    assert Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).size == (256, 256)


def test_figures_give_exact_values_on_hover():
    from components import memorization_figures as tab

    r = {"layers": ["down0.attn0", "mid.attn0"], "z": {"down0.attn0": [0.5, 4.25], "mid.attn0": [1.125]},
         "activation": {"down0.attn0": [0.01, 0.2], "mid.attn0": [0.03]}, "score": 0.61234,
         "theta_mem": 0.5, "memorized": True, "max_z": 4.25}
    fig = tab.z_plot(r, found=["down0.attn0:1"])
    tips = [t for tr in fig.data for t in (tr.hovertext or [])]
    assert "down0.attn0:1<br>z = 4.250<br>mean |activation| 0.2" in tips
    assert "down0.attn0:1 (found by NeMo) z = 4.250" in tips
    assert "score 0.6123 · θ_mem 0.5000" in tab.score_html(r)
    hist = tab.hist_plot([{"n_neurons": 3}, {"n_neurons": 3}])
    assert "%{y}" in hist.data[0].hovertemplate and "%{x}" in hist.data[0].hovertemplate
