"""Features' contrast and several-clamps rows of benchmarks.fullsize, at LLaVA-NeXT-8B's shapes: its
Llama-3-8B language model (random weights from the real config) and the lmms-lab SAE's 131072 × 4096
TopK shape (k = 256) at `layers.24`.

- contrast: two sets of 64 images (the tab's default), each image a prompt of 24 tokens and 576 image
  tokens, in the hub's batches of 4 (backend.sae.contrast.HUB_BATCH): the LM up to the hookpoint, the
  SAE's codes pooled per image (contrast.pooled), one copy to the host, then the rank test over every
  feature (contrast.contrast_stats), on the GPU where there is one, as the app runs it (the H200 run
  of 2026-12-04 ran it on the host with scipy: 2.18 s of 4.32 s). Baseline: the bare LM forward to the hookpoint over the same
  batches. The statistics' own time is reported beside.
- steering: one caption (the prompt pass and 24 generated tokens, greedy) with three clamps and two
  suppressed features in one intervention (steer.clamp_features, positions "active"), against the
  same caption with one clamp; the hook-free caption is reported beside. The issue's target is
  three clamps ≤ 1.5 × one clamp.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from benchmarks.fullsize_parts import SAE_SHAPE, default_dtype, llava_next_lm_config, measure, row, sync

HOOK = 24  # LLaVA-NeXT-8B's SAE site, model.layers.24


def _images_per_set(scale: str) -> int:
    return {"full": 64, "width": 8, "tiny": 16}[scale]


def bench_sae_contrast(scale: str, dev: torch.device, repeats: int) -> list[dict]:
    from transformers import LlamaModel

    from backend.sae import contrast as C
    from backend.sae.sae import TopKSAE

    cfg = llava_next_lm_config(scale, HOOK + 1)
    n_latents, k, patches, prompt = SAE_SHAPE[scale]
    per_set = _images_per_set(scale)
    batch = C.HUB_BATCH
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(dev), default_dtype(dtype):
        lm = LlamaModel(cfg).eval().requires_grad_(False)
        sae = TopKSAE(cfg.hidden_size, n_latents, k, dtype=dtype).eval().requires_grad_(False)
    # distinct inputs per image, so the rank test sees real spread (identical images tie everywhere)
    xs = [
        torch.randn(batch, prompt + patches, cfg.hidden_size, device=dev, dtype=dtype) * 0.02
        for _ in range(2 * per_set // batch)
    ]
    sl = slice(prompt, prompt + patches)
    # the residual after the hookpoint's layer, before the LM's final norm (the SAE's input)
    grabbed: list[torch.Tensor] = []
    handle = lm.layers[-1].register_forward_hook(lambda m, i, o: grabbed.append(o[0] if isinstance(o, tuple) else o))

    @torch.no_grad()
    def forward():
        for x in xs:
            lm(inputs_embeds=x, use_cache=False)
        grabbed.clear()

    @torch.no_grad()
    def activations() -> tuple[np.ndarray, np.ndarray]:
        out = []
        for x in xs:
            grabbed.clear()
            lm(inputs_embeds=x, use_cache=False)  # the LM ends at the hookpoint
            vals, idx = sae.encode_sparse(grabbed[0][:, sl])
            out.append(C.pooled(vals, idx, n_latents))
        acts = torch.cat(out).cpu().numpy().astype(np.float32)  # one copy to the host, as the tab does
        return acts[:per_set], acts[per_set:]

    stats_s: list[float] = []

    def contrast():
        a, b = activations()
        t0 = time.perf_counter()
        # the rank test where the app runs it: on the GPU when there is one (contrast.contrast)
        res = C.contrast_stats(a, b, device=dev if dev.type == "cuda" else None)
        stats_s.append(time.perf_counter() - t0)
        return res

    try:
        main = measure(contrast, dev, repeats)
        base = measure(forward, dev, repeats)
        res = contrast()
    finally:
        handle.remove()
    return [
        row(
            "Features",
            f"contrast of 2 × {per_set} images, {n_latents} latents, {patches} patches, batch {batch}, "
            f"{cfg.num_hidden_layers} layers of width {cfg.hidden_size}",
            main,
            base,
            "bare LM forward to the hookpoint, same images",
            statistics_s=float(np.median(stats_s)),
            features_tested=res["n_tested"],
        )
    ]


def bench_sae_steer(scale: str, dev: torch.device, repeats: int) -> list[dict]:
    from transformers import LlamaForCausalLM

    from backend.sae import steer
    from backend.sae.sae import TopKSAE

    layers = 32 if scale == "full" else 2
    cfg = llava_next_lm_config(scale, layers)
    n_latents, k, patches, prompt = SAE_SHAPE[scale]
    hook = f"model.layers.{min(HOOK, layers - 1)}"
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(dev), default_dtype(dtype):
        model = LlamaForCausalLM(cfg).eval().requires_grad_(False)
        sae = TopKSAE(cfg.hidden_size, n_latents, k, dtype=dtype).eval().requires_grad_(False)
    x = torch.randn(1, prompt + patches, cfg.hidden_size, device=dev, dtype=dtype) * 0.02
    sl = slice(prompt, prompt + patches)
    new_tokens = 24
    # features that fire on these inputs, so "active" has patches to edit (a silent one edits nothing)
    with torch.no_grad():
        h = model.model(inputs_embeds=x, use_cache=False, output_hidden_states=True).hidden_states[
            int(hook.rsplit(".", 1)[1]) + 1
        ]
        _, idx = sae.encode_sparse(h[:, sl])
    common = torch.bincount(idx.flatten(), minlength=n_latents).argsort(descending=True)[:5].tolist()
    one = [(common[0], 10.0)]
    three = [(common[0], 10.0), (common[1], 8.0), (common[2], 6.0)]
    suppress = common[3:5]

    @torch.no_grad()
    def caption():
        model.generate(
            inputs_embeds=x,
            attention_mask=torch.ones(x.shape[:2], dtype=torch.long, device=dev),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
        )

    def clamped(clamps, sup=()):
        edited: list[torch.Tensor] = []

        def run():
            edited.clear()
            with steer.clamp_features(
                model, sae, hook, clamps, positions="active", image_positions=sl, suppress=sup, edited=edited
            ):
                caption()
            return int(sum(e.item() for e in edited))  # read once the caption is done, as the tab does

        return run

    for _ in range(3):  # measure's one warm-up was not enough on an H200 for the first (1.1 s vs 0.63 s)
        caption()
    plain = measure(caption, dev, repeats)
    single = measure(clamped(one), dev, repeats)
    several = measure(clamped(three, suppress), dev, repeats)
    sync(dev)
    return [
        row(
            "Features",
            f"steering: one caption ({new_tokens} tokens) with 3 clamps + 2 suppressed, {n_latents} latents, "
            f"{layers} layers of width {cfg.hidden_size}",
            several,
            single,
            "the same caption with one clamp",
            target_ratio=1.5,
            no_clamp_s=plain["s"],
            one_clamp_over_no_clamp=single["s"] / plain["s"],
            patches_edited_three=clamped(three, suppress)(),
            patches_edited_one=clamped(one)(),
        )
    ]
