"""The GPU-shape account of `benchmarks.fullsize`'s rows (MathNeuro, feature index, MambaLRP, and NeMo's
search from benchmarks.nemo_account): each computation and its baseline built at the papers' full
configs on the meta device, in the GPU's dtype, so nothing is computed and a CPU counts them in seconds (`benchmarks.account`), with the
projection on an H200. Printed beside the CPU figures by `python -m benchmarks.fullsize`
(`--no-account` leaves it out); `python -m benchmarks.fullsize_account [--only ...]` prints it alone.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.account import account  # noqa: E402
from benchmarks.account_projection import H200  # noqa: E402
from benchmarks.fullsize_parts import (  # noqa: E402
    SAE_SHAPE,
    account_row,
    default_dtype,
    index_step,
    llama_1b,
    llava_next_lm_config,
)

META = torch.device("meta")


def account_mathneuro() -> list[dict]:
    from backend.mathneuro import core

    model = llama_1b("full", META, torch.bfloat16)
    n, length, batch = 100, 192, 25
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    math_ids = [torch.randint(0, vocab, (length,), generator=g) for _ in range(n)]
    non_ids = [torch.randint(0, vocab, (length,), generator=g) for _ in range(n)]

    @torch.no_grad()
    def forward():
        for s in range(0, 2 * n, batch):
            model(input_ids=torch.stack((math_ids + non_ids)[s : s + batch]).to(META), use_cache=False)

    main, _ = account(core.identify, model, math_ids, non_ids, 0.05, batch_size=batch, meta=True)
    base, _ = account(forward, meta=True)
    return [
        account_row(
            "Math neurons",
            "MathNeuro identification per 100 + 100 samples of 192 tokens, Llama-3.2-1B, bf16",
            main,
            base,
            "forward over the same samples",
        )
    ]


def account_sae_index() -> list[dict]:
    from transformers import LlamaModel

    from backend.sae.index import IndexBuilder
    from backend.sae.sae import TopKSAE

    cfg = llava_next_lm_config("full", 25)
    n_latents, k, patches, prompt = SAE_SHAPE["full"]
    batch = 8
    with torch.device(META), default_dtype(torch.bfloat16):
        lm = LlamaModel(cfg).eval().requires_grad_(False)
        sae = TopKSAE(cfg.hidden_size, n_latents, k, dtype=torch.bfloat16).eval().requires_grad_(False)
    x = torch.empty(batch, prompt + patches, cfg.hidden_size, device=META, dtype=torch.bfloat16)
    sl = slice(prompt, prompt + patches)
    builder = IndexBuilder(n_latents, patches, 16, device=META)
    index, handle = index_step(lm, sae, builder, x, sl)
    try:
        main, _ = account(index, meta=True)
    finally:
        handle.remove()

    @torch.no_grad()
    def forward():
        return lm(inputs_embeds=x, use_cache=False).last_hidden_state

    base, _ = account(forward, meta=True)
    return [
        account_row(
            "Features",
            "feature index, LLaVA-NeXT-8B's LM to layers.24 + 131072-latent TopK SAE, batch 8 "
            "(the update's boolean selections counted at their largest)",
            main,
            base,
            "bare LM forward to the hookpoint, same tokens",
        )
    ]


class _one_kernel_scan:
    """The selective scan as a GPU runs it: one Triton kernel per direction (scan_triton), here one
    element-wise kernel over the same tensors on the meta device, instead of the CPU's loop of a
    launch per time step."""

    def __enter__(self):
        from backend.lrp import scan_triton as st

        self.st, self.saved = st, (st.usable, st.forward, st.backward)
        st.usable = lambda *ts: all(t.device.type == "meta" for t in ts)
        st.forward = lambda a, b: torch.addcmul(b, a, b)
        st.backward = lambda a, h, gh, need_a: (torch.addcmul(gh, a, h), torch.mul(gh, h) if need_a else None)

    def __exit__(self, *exc):
        self.st.usable, self.st.forward, self.st.backward = self.saved


def account_lrp() -> list[dict]:
    from transformers import MambaConfig, MambaForCausalLM

    from backend.lrp import attribute_text

    rows = []
    for name, d, n_layers in (("mamba-130m", 768, 24), ("mamba-1.4b", 2048, 48)):
        cfg = MambaConfig(
            vocab_size=50280,
            hidden_size=d,
            state_size=16,
            num_hidden_layers=n_layers,
            intermediate_size=2 * d,
            conv_kernel=4,
            time_step_rank=math.ceil(d / 16),
            use_conv_bias=True,
            residual_in_fp32=True,
        )
        with torch.device(META):
            model = MambaForCausalLM(cfg).eval().requires_grad_(False)
        ids = torch.randint(0, 50280, (1, 512))
        with _one_kernel_scan():
            main, _ = account(attribute_text, model, ids, target=42, method="mambalrp", meta=True)
            base, _ = account(attribute_text, model, ids, target=42, method="gi", meta=True)
        rows.append(
            account_row(
                "Relevance",
                f"MambaLRP, {name}, 512 tokens, fp32",
                main,
                base,
                "Gradient×Input through the same forward",
            )
        )
    return rows


def account_nemo() -> list[dict]:
    from benchmarks.nemo_account import account_nemo as rows  # SD-1.4's evaluation paths and the projection

    return rows("full")


ACCOUNTS = {"mathneuro": account_mathneuro, "sae_index": account_sae_index, "lrp": account_lrp, "nemo": account_nemo}


def _cell(a: dict) -> str:
    from benchmarks.account_projection import _size

    return (
        f"{a['kernels']} ({a['matmul_kernels']} mm) / {a['syncs']} / {a['d2h']} ({_size(a['d2h_bytes'])}) / "
        f"{_size(a['other_bytes'])} / {a['matmul_flops'] / 1e12:.3g}"
    )


def table(rows: list[dict]) -> str:
    head = (
        "| tab | computation | kernels / syncs / D2H copies / non-matmul bytes / matmul TFLOP | baseline: the same | "
        f"projected ms vs baseline ({H200.name}) | projected ratio |\n|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['tab']} | account FAILED: {r['error'][:200]} | | | | |")
            continue
        lines.append(
            f"| {r['tab']} | {r['what']} | {_cell(r['account'])} | {_cell(r['baseline_account'])} | "
            f"{1e3 * r['projected_s']:.1f} vs {1e3 * r['baseline_projected_s']:.1f} | "
            f"**{r['projected_ratio']:.2f}** (projection) |"
        )
    notes = [line for r in rows for line in r.get("lines", [])]
    return "\n".join(lines + ([""] + notes if notes else []))


def accounts(only: list[str]) -> list[dict]:
    rows = []
    for name in only:
        if name not in ACCOUNTS:
            continue
        try:
            rows += ACCOUNTS[name]()
        except Exception as e:  # one failing account must not hide the others
            rows.append({"tab": name, "error": f"{type(e).__name__}: {e}"})
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(ACCOUNTS))
    args = ap.parse_args()
    print(table(accounts([s for s in args.only.split(",") if s])))
