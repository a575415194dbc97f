"""MambaLRP: one explanation by the official wrapper beside backend.lrp.attribute_text."""

from __future__ import annotations

from pathlib import Path

import torch

from benchmarks.vs_official.common import alternate, official_path, row


def mamba_130m():
    """Random weights from state-spaces/mamba-130m-hf's config (nothing downloaded)."""
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    cfg = MambaConfig(
        vocab_size=50280,
        hidden_size=768,
        state_size=16,
        num_hidden_layers=24,
        intermediate_size=1536,
        conv_kernel=4,
        time_step_rank=48,
        use_conv_bias=True,
        residual_in_fp32=True,
    )
    return MambaForCausalLM(cfg).eval().requires_grad_(False)


def bench_lrp(folder: Path, repeats: int, lengths=(128, 512)) -> list[dict]:
    """One explanation (relevance of every token for the target logit at the last position): the
    official wrapper's slow path (their CUDA path needs mamba_ssm kernels; it also skips the SiLU
    rule) and relevance_propagation, against backend.lrp.attribute_text."""
    from backend.lrp import attribute_text

    with official_path(folder):
        from mamba_lrp.lrp.utils import relevance_propagation
        from mamba_lrp.model.mamba_huggingface import ModifiedMambaForCausalLM
    model = mamba_130m()
    explainable = ModifiedMambaForCausalLM(model, is_fast_forward_available=False).eval()
    vocab, target, rows = model.config.vocab_size, 42, []
    for n in lengths:
        ids = torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            emb = model.get_input_embeddings()(ids)

        def official():
            return torch.as_tensor(relevance_propagation(explainable, emb, torch.tensor([target]), vocab)[0])

        w, o, rw, ro = alternate(
            lambda: attribute_text(model, ids, target=target, method="mambalrp"), official, repeats
        )
        d = float((rw - ro).abs().max())
        rows.append(
            row(
                "MambaLRP",
                f"one explanation, mamba-130m config, {n} tokens",
                w,
                o,
                f"{d:.1e} (relevance max {float(ro.abs().max()):.2f})",
            )
        )
    return rows
