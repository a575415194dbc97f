"""NeMo backend on tiny random Stable Diffusion pipelines (built from the zoo recipe's configs)."""

import json

import numpy as np
import pytest
import torch

from backend import nemo
from backend.core.interventions import count_hooks, scale_weights
from tests.helpers.tiny import tiny_sd_pipe

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def pipe():
    return tiny_sd_pipe()


PROMPT = "a red circle and a blue ring on a yellow background"

# Stable Diffusion 1.4's UNet config (CompVis/stable-diffusion-v1-4, unet/config.json).
SD14_UNET = {
    "_class_name": "UNet2DConditionModel",
    "act_fn": "silu",
    "attention_head_dim": 8,
    "block_out_channels": [320, 640, 1280, 1280],
    "center_input_sample": False,
    "cross_attention_dim": 768,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "downsample_padding": 1,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "in_channels": 4,
    "layers_per_block": 2,
    "mid_block_scale_factor": 1,
    "norm_eps": 1e-05,
    "norm_num_groups": 32,
    "out_channels": 4,
    "sample_size": 64,
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
    assert torch.all(v[:, :, [3, 7]] == 0)  # both halves of the batch
    assert torch.equal(v[:, :, 0], seen[0][:, :, 0])
    assert not torch.allclose(out, ref)
    assert torch.equal(after, ref)  # exact restore
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
    prompts = [
        "a red circle on a blue background",
        "a white square on a black background",
        "a green ring and a purple cross on a yellow background",
        "a blue triangle on a red background",
    ]
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
    assert nemo.auroc([2, 1], [1, 0]) == pytest.approx(0.875) and np.isnan(nemo.auroc([], [1]))


@pytest.mark.parametrize("channels,size", [(1, 16), (3, 32), (4, 24)])
def test_ssim_equals_scikit_image(channels, size):
    """Our SSIM (on the device, batched) is scikit-image's with the same settings: a Gaussian window of
    σ = 1.5 truncated at 3.5σ (11 taps, scikit-image's fixed choice), population covariances, the mean
    over valid window positions and over channels. The app uses 7 taps (`win=7`, as latents are 8×8)."""
    from skimage.metrics import structural_similarity

    rng = np.random.default_rng(channels)
    a = rng.random((2, size, size, channels))
    b = np.clip(a + rng.normal(0, 0.2, a.shape), 0, 1)
    ours = nemo.ssim(torch.as_tensor(a).permute(0, 3, 1, 2), torch.as_tensor(b).permute(0, 3, 1, 2), win=11)
    theirs = [
        structural_similarity(
            x, y, gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=1.0, channel_axis=-1
        )
        for x, y in zip(a, b)
    ]
    np.testing.assert_allclose(ours.numpy(), theirs, rtol=1e-5, atol=1e-6)
    assert 0.2 < min(theirs) < 0.95


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
        best = max(float(nemo.ssim(d[i : i + 1], d[j : j + 1])) for j in range(4) if j != i)
        assert agree[i].item() == pytest.approx(best, abs=1e-6)
    order = agree.argsort()
    cut = float(agree[order[1]] + agree[order[2]]) / 2  # drops exactly the two least agreeing seeds
    ch = Checker(pipe, PROMPT, range(4), 0.0, cut)
    assert ch.seeds == sorted(int(i) for i in order[2:])
    torch.testing.assert_close(ch.vanilla, d[sorted(order[2:].tolist())])
    # nothing above the threshold: the prompt is skipped with no neurons and one evaluation
    stats = nemo.neuron_stats(
        pipe,
        [
            "a red circle on a blue background",
            "a white square on a black background",
            "a green ring on a yellow background",
        ],
    )
    loc = nemo.localize(pipe, PROMPT, stats, theta_mem=float(agree.max()) + 1e-3, num_seeds=4)
    assert loc.skipped and not loc.found and loc.neurons == {} and loc.evaluations == 1
    assert loc.seeds == [0, 1, 2, 3] and loc.seeds_kept == []
    assert loc.to_json()["skipped"] is True


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

    m = service.MemoModel(
        preset=Preset("memorization", "zoo", "x", "diffusers.StableDiffusionPipeline"),
        pipe=pipe,
        folder=None,
        info={},
        theta_mem=0.5,
        guidance_scale=4.0,
        num_seeds=3,
        num_inference_steps=4,
    )
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
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "merges.txt",
        "special_tokens_map.json",
        "tokenizer_config.json",
        "vocab.json",
    ]
    vocab = json.loads((tmp_path / "vocab.json").read_text(encoding="utf-8"))
    units = list(bytes_to_unicode().values())
    assert list(vocab)[:512] == units + [u + "</w>" for u in units]
    assert list(vocab)[-2:] == ["<|startoftext|>", "<|endoftext|>"] and len(vocab) > 2000
    assert (tmp_path / "merges.txt").read_text(encoding="utf-8").startswith("#version: 0.2\n")
    tok = CLIPTokenizer.from_pretrained(tmp_path)
    assert tok.model_max_length == 77
    assert tok.tokenize("A man riding a Horse on the beach") == [
        "a</w>",
        "man</w>",
        "riding</w>",
        "a</w>",
        "horse</w>",
        "on</w>",
        "the</w>",
        "beach</w>",
    ]
    ids = tok("a dog").input_ids
    assert ids[0] == vocab["<|startoftext|>"] and ids[-1] == vocab["<|endoftext|>"] == max(vocab.values())
