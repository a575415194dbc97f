"""Full-size benchmarks: each tab's main computation on random weights built from the papers' real
configs (no downloads), timed against its plain baseline in the same run, with peak GPU memory.

    python -m benchmarks.fullsize                       # real sizes (a GPU machine)
    python -m benchmarks.fullsize --scale tiny          # reduced configs (a CPU smoke run, < 1 min)
    python -m benchmarks.fullsize --scale width         # the papers' widths, 2 layers (a CPU, minutes)
    python -m benchmarks.fullsize --only lrp,pissa --json out.json

| tab | computation | baseline |
|---|---|---|
| Relevance | one MambaLRP explanation (mamba-130m, mamba-1.4b configs; 512 tokens) | forward + backward (Gradient×Input through transformers' Mamba) |
| Memorization | NeMo localisation of one prompt (SD-1.4 UNet + CLIP text encoder configs) | one UNet forward of the CFG batch (2 × seeds latents) |
| Features | feature index throughput, images/s (LLaVA-NeXT-8B's Llama-3-8B LM up to layer 24, 576 image tokens, 131072 × 4096 TopK SAE, k = 256) | the bare LM forward to layer 24 |
| Features | contrast of 2 × 64 images (the same LM and SAE, benchmarks.sae_fullsize) | the bare LM forward to layer 24 over the same images |
| Features | one caption with 3 clamps + 2 suppressed features in one intervention (the whole 32-layer LM) | the same caption with one clamp |
| Math neurons | MathNeuro identification per 100 math + 100 non-math samples (Llama-3.2-1B config) | a forward pass over the same 200 samples |
| Adapters | PiSSA init (peft, pissa_niter_4, r = 16) of every linear layer (Llama-3.2-1B config) | a full SVD of every linear weight |

The layers after the SAE's hookpoint do not change its input, so the index benchmark builds the LM
with 25 layers (hookpoint `layers.24`) for both the index and its baseline. Random weights give the
real shapes and FLOPs; NeMo's search length on random weights is not a memorized prompt's, so its
row also reports the number of noise evaluations (the ratio per evaluation is the stable figure),
and one search evaluation is also timed on its own against one UNet forward of the same latents.

`--scale width` is for a machine without a GPU: every model at its paper's width with 2 layers
(the UNet whole, at SD-1.4's 64 × 64 latents, with fewer seeds), float32, and a small vocabulary
where the embedding or head is not per-layer work (inputs_embeds, a tied unscored head). A ratio of
per-layer work carries over to the full depth; the feature index's SAE is one fixed cost per
forward, so its row also gives the ratio projected to the 25 layers up to `layers.24`.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCALES = ("tiny", "width", "full")

from benchmarks import sae_fullsize  # noqa: E402  (Features' contrast and several clamps)
from benchmarks.fullsize_parts import (  # noqa: E402  (shared with the account and NeMo rows)
    SAE_SHAPE,
    default_dtype,
    index_step,
    llama_1b,
    llava_next_lm_config,
    measure,
    row,
)


# ------------------------------------------------------------------------------------ relevance
def bench_lrp(scale: str, dev: torch.device, repeats: int) -> list[dict]:
    from transformers import MambaConfig, MambaForCausalLM

    from backend.lrp import attribute_text

    sizes = {
        "full": [("mamba-130m", 768, 24), ("mamba-1.4b", 2048, 48)],
        "width": [("mamba-130m width, 2 layers", 768, 2), ("mamba-1.4b width, 2 layers", 2048, 2)],
        "tiny": [("mamba-tiny", 64, 2)],
    }[scale]
    tokens = 32 if scale == "tiny" else 512
    vocab = 50280 if scale == "full" else 1000
    rows = []
    for name, d, n_layers in sizes:
        torch.manual_seed(0)
        cfg = MambaConfig(
            vocab_size=vocab,
            hidden_size=d,
            state_size=16,
            num_hidden_layers=n_layers,
            intermediate_size=2 * d,
            conv_kernel=4,
            time_step_rank=math.ceil(d / 16),
            use_conv_bias=True,
            residual_in_fp32=True,
        )
        model = MambaForCausalLM(cfg).to(dev).eval().requires_grad_(False)
        ids = torch.randint(0, vocab, (1, tokens), device=dev)
        target = 42

        def fwd_bwd():  # Gradient×Input through transformers' own Mamba: the plain baseline
            emb = model.get_input_embeddings()(ids).detach().requires_grad_(True)
            out = model(inputs_embeds=emb, use_cache=False).logits[0, -1, target]
            (g,) = torch.autograd.grad(out, emb)
            return (emb * g).sum(-1)

        lrp = measure(lambda: attribute_text(model, ids, target=target, method="mambalrp"), dev, repeats)
        gi_fast = measure(lambda: attribute_text(model, ids, target=target, method="gi"), dev, repeats)
        if scale == "width":  # transformers' per-step CPU scan with autograd takes minutes at 512 tokens
            rows.append(
                row(
                    "Relevance",
                    f"MambaLRP, {name}, {tokens} tokens",
                    lrp,
                    gi_fast,
                    "forward+backward through the same forward code (Gradient×Input)",
                )
            )
        else:
            base = measure(fwd_bwd, dev, repeats)
            rows.append(
                row(
                    "Relevance",
                    f"MambaLRP, {name}, {tokens} tokens",
                    lrp,
                    base,
                    "forward+backward",
                    target_ratio=1.3,
                    gi_same_forward_s=gi_fast["s"],
                    ratio_to_gi_same_forward=lrp["s"] / gi_fast["s"],
                )
            )
        model = None  # this size's weights go before the next size is built
    return rows


# ------------------------------------------------------------------------------------ memorization
def bench_nemo(scale: str, dev: torch.device, repeats: int) -> list[dict]:
    from benchmarks.nemo_fullsize import bench_nemo as bench  # today's path beside the sequential one

    return bench(scale, dev, repeats)


# ------------------------------------------------------------------------------------ features
def bench_sae_index(scale: str, dev: torch.device, repeats: int) -> list[dict]:
    from transformers import LlamaModel

    from backend.sae.index import IndexBuilder
    from backend.sae.sae import TopKSAE

    # Llama-3-8B (LLaVA-NeXT-8B's LM) up to layer 24 and the lmms-lab SAE's shape; at "width" 2 layers
    # (hookpoint layers.1) and the whole 131k SAE
    cfg = llava_next_lm_config(scale, 25)
    n_latents, k, patches, prompt = SAE_SHAPE[scale]
    batch = {"full": 8, "width": 1, "tiny": 4}[scale]
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(dev), default_dtype(dtype):
        lm = LlamaModel(cfg).eval().requires_grad_(False)
        sae = TopKSAE(cfg.hidden_size, n_latents, k, dtype=dtype).eval().requires_grad_(False)
    x = torch.randn(batch, prompt + patches, cfg.hidden_size, device=dev, dtype=dtype) * 0.02
    sl = slice(prompt, prompt + patches)
    builder = IndexBuilder(n_latents, patches, 16, device=dev)  # the state beside the SAE

    @torch.no_grad()
    def forward():
        return lm(inputs_embeds=x, use_cache=False).last_hidden_state

    index, handle = index_step(lm, sae, builder, x, sl)
    try:
        main = measure(index, dev, repeats)
    finally:
        handle.remove()
    base = measure(forward, dev, repeats)
    t0 = time.perf_counter()
    builder.tensors()  # the slots ranked: once per index, however many images it holds
    extra = {"ranking_once_s": time.perf_counter() - t0}
    if scale == "width":  # the SAE and the update are one cost per forward, the LM's grows with depth
        layers = cfg.num_hidden_layers
        extra["ratio_at_25_layers"] = 1 + (main["s"] - base["s"]) / (base["s"] * 25 / layers)
    r = row(
        "Features",
        f"feature index, {n_latents} latents, {patches} patches, batch {batch}, "
        f"{cfg.num_hidden_layers} layers of width {cfg.hidden_size}",
        main,
        base,
        "bare LM forward to the hookpoint, same tokens",
        images_per_s=batch / main["s"],
        baseline_images_per_s=batch / base["s"],
        index_state_gib=builder.state_bytes() / 2**30,
        **extra,
    )
    return [r]


# ------------------------------------------------------------------------------------ math / adapters
def bench_mathneuro(scale: str, dev: torch.device, repeats: int) -> list[dict]:
    from backend.mathneuro import core

    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = llama_1b(scale, dev, dtype)
    n, length, batch = {"full": (100, 192, 25), "width": (4, 192, 4), "tiny": (8, 16, 4)}[scale]
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    math_ids = [torch.randint(0, vocab, (length,), generator=g) for _ in range(n)]
    non_ids = [torch.randint(0, vocab, (length,), generator=g) for _ in range(n)]

    @torch.no_grad()
    def forward():
        for s in range(0, 2 * n, batch):
            chunk = (math_ids + non_ids)[s : s + batch]
            model(input_ids=torch.stack(chunk).to(dev), use_cache=False)

    base = measure(forward, dev, repeats)
    scale_to_100 = 100 / n
    base = {**base, "s": base["s"] * scale_to_100}
    depth = f", {model.config.num_hidden_layers} layers of width {model.config.hidden_size}"
    what = f"MathNeuro identification per 100 + 100 samples of {length} tokens{depth}"
    if scale == "width":
        # A CPU runs a few samples: the hooked forwards scale with the samples, the top-K selection
        # is one cost per identification, so each is timed alone and the total put at 100 + 100.
        hooked = measure(
            lambda: (core.norms(model, math_ids, batch_size=batch), core.norms(model, non_ids, batch_size=batch)),
            dev,
            repeats,
        )
        nm, nn_ = core.norms(model, math_ids, batch_size=batch), core.norms(model, non_ids, batch_size=batch)
        select = measure(lambda: core.masks_from_norms(model, nm, 0.05, minus=nn_), dev, repeats)
        main = {**hooked, "s": hooked["s"] * scale_to_100 + select["s"]}
        return [
            row(
                "Math neurons",
                what + f" (hooked forwards timed on {n} + {n}, scaled; top-K once)",
                main,
                base,
                "forward over the same samples",
                hooked_ratio=hooked["s"] * scale_to_100 / base["s"],
                selection_s=select["s"],
            )
        ]
    main = measure(lambda: core.identify(model, math_ids, non_ids, 0.05, batch_size=batch), dev, max(1, repeats // 2))
    main = {**main, "s": main["s"] * scale_to_100}
    # its two parts, so that a GPU run says where the time goes: the hooked forwards, the selection
    kw = dict(batch_size=batch, host=False)
    nm, nn_ = core.norms(model, math_ids, **kw), core.norms(model, non_ids, **kw)
    hooked = measure(lambda: (core.norms(model, math_ids, **kw), core.norms(model, non_ids, **kw)), dev, 1)
    select = measure(lambda: core.masks_from_norms(model, nm, 0.05, minus=nn_), dev, 1)
    return [
        row(
            "Math neurons",
            what,
            main,
            base,
            "forward over the same samples",
            hooked_ratio=hooked["s"] * scale_to_100 / base["s"],
            selection_s=select["s"],
        )
    ]


def bench_pissa(scale: str, dev: torch.device, repeats: int) -> list[dict]:
    from peft import LoraConfig, get_peft_model

    from backend.pissa.adapters import linear_layers

    model = llama_1b(scale, dev, torch.float32)
    rank = 16 if scale == "full" else 4
    names = [n for n in linear_layers(model) if not n.endswith("lm_head")]
    targets = sorted({n.rsplit(".", 1)[-1] for n in names})

    def full_svd():
        for n in names:
            torch.linalg.svd(model.get_submodule(n).weight, full_matrices=False)

    def pissa_init():
        m = copy.deepcopy(model)
        get_peft_model(
            m, LoraConfig(r=rank, lora_alpha=rank, target_modules=targets, init_lora_weights="pissa_niter_4")
        )

    def copy_only():
        copy.deepcopy(model)

    base = measure(full_svd, dev, 1)  # minutes at full size: one timed run after the warm-up
    copy_s = measure(copy_only, dev, 1)["s"]
    main = measure(pissa_init, dev, 1)
    main = {**main, "s": main["s"] - copy_s}  # the model copy each init needs is not PiSSA's cost
    return [
        row(
            "Adapters",
            f"PiSSA init (pissa_niter_4, r={rank}) of {len(names)} linear layers",
            main,
            base,
            "full SVD of every linear weight",
            layers=len(names),
        )
    ]


BENCHES = {
    "lrp": bench_lrp,
    "nemo": bench_nemo,
    "sae_index": bench_sae_index,
    "sae_contrast": sae_fullsize.bench_sae_contrast,
    "sae_steer": sae_fullsize.bench_sae_steer,
    "mathneuro": bench_mathneuro,
    "pissa": bench_pissa,
}


def device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return f"{torch.cuda.get_device_name(dev)} (CUDA {torch.version.cuda})"
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def table(rows: list[dict]) -> str:
    head = (
        "| tab | computation | time | baseline | baseline time | ratio | peak GPU GiB |\n|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['tab']} | FAILED: {r['error'][:200]} | | | | | |")
            continue
        peak = "n/a" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}"
        extra = ""
        if "images_per_s" in r:
            extra = (
                f" ({r['images_per_s']:.3g} vs {r['baseline_images_per_s']:.3g} images/s; "
                f"ranking the slots once per index {r['ranking_once_s']:.1f} s)"
            )
        if "ratio_to_gi_same_forward" in r:
            extra = f" ({r['ratio_to_gi_same_forward']:.2f} against GI through the same forward)"
        if "ratio_at_25_layers" in r:
            extra += f" ({r['ratio_at_25_layers']:.3f} projected to 25 layers)"
        if "hooked_ratio" in r:
            extra = f" (hooked forwards {r['hooked_ratio']:.2f}, top-K selection {r['selection_s']:.2g} s)"
        if "noise_evaluations" in r:
            extra = f" ({r['noise_evaluations']:g} evaluations; {r['ratio_per_evaluation']:.2f} per evaluation"
            if "unet_batches" in r:
                extra += (
                    f"; {r['unet_batches']} UNet batches; sequential search {r['before_s']:.1f} s, "
                    f"{r['before_evaluations']} forwards, same result: {r['same_result']}"
                )
            extra += ")"
        elif "before_ratio" in r:
            extra = f" (sequential path before: {r['before_s'] * 1000:.1f} ms, {r['before_ratio']:.2f})"
        lines.append(
            f"| {r['tab']} | {r['what']} | {r['s'] * 1000:.1f} ms | {r['baseline']} | "
            f"{r['baseline_s'] * 1000:.1f} ms | {r['ratio']:.2f}{extra} | {peak} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--scale",
        choices=SCALES,
        default=None,
        help="full (real configs; the default with a GPU) or tiny (the default on a CPU)",
    )
    ap.add_argument("--device", default=None, help="cuda | cpu (default: cuda when available)")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {','.join(BENCHES)}")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per measurement (median)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (tiny runs)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    ap.add_argument(
        "--account",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the GPU-shape account of the mathneuro, sae_index, lrp and nemo rows at full size "
        "(benchmarks/fullsize_account.py; the default on a CPU)",
    )
    args = ap.parse_args(argv)
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    scale = args.scale or ("full" if dev.type == "cuda" else "tiny")
    repeats = args.repeats or (5 if scale == "full" else 1)
    torch.set_num_threads(args.threads)
    only = [s for s in args.only.split(",") if s] or list(BENCHES)
    if scale == "width" and not args.only:
        only.remove("pissa")  # full SVDs of 2048 × 8192 matrices on a CPU, and no target of its own
    unknown = set(only) - set(BENCHES)
    if unknown:
        ap.error(f"unknown benchmark(s) {sorted(unknown)}; choose from {list(BENCHES)}")
    rows: list[dict] = []
    t0 = time.perf_counter()
    for name in only:
        t = time.perf_counter()
        try:
            rows += BENCHES[name](scale, dev, repeats)
        except Exception as e:  # one failing tab must not hide the others' figures
            rows.append({"tab": name, "what": "failed", "error": f"{type(e).__name__}: {e}"})
            print(f"[{name} failed: {type(e).__name__}: {e}]", file=sys.stderr, flush=True)
        finally:
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        print(f"[{name}: {time.perf_counter() - t:.1f} s]", file=sys.stderr, flush=True)
    out = {
        "device": device_name(dev),
        "scale": scale,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "wall_s": time.perf_counter() - t0,
        "rows": rows,
    }
    print(f"device: {out['device']}   scale: {scale}   torch {torch.__version__}   {out['date']}")
    print(table(rows))
    for r in rows:
        for note in r.get("notes", []):
            print(note)
    if args.account if args.account is not None else dev.type == "cpu":
        from benchmarks import fullsize_account

        out["account"] = fullsize_account.accounts(only)
        if out["account"]:
            print(
                "\nGPU-shape account (full configs on the meta device; the projection is a model, not a measurement):"
            )
            print(fullsize_account.table(out["account"]))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    if any("error" in r for r in rows):
        sys.exit(1)
    return out


if __name__ == "__main__":
    main()
