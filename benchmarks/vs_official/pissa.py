"""PiSSA: initialisation by peft and by GraphPKU/PiSSA's init_pissa.py beside backend.pissa."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks.vs_official.common import ROOT, alternate, row


def llama_for_pissa(folder: Path):
    """A Llama with 2 layers of 1024 × 2816 (14 linear weights), saved with the zoo math LM's
    tokenizer for the official script, which loads a model folder."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=1000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=2,
        num_attention_heads=16,
        num_key_value_heads=16,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).eval().requires_grad_(False)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(ROOT / "assets" / "zoo" / "math-llama").save_pretrained(folder)
    return model


def bench_pissa(folder: Path, repeats: int, rank: int = 16) -> list[dict]:
    """Initialisation of every linear layer but the head, r = 16: the workbench (backend.pissa.
    adapters.adapt) against peft itself (get_peft_model on a copy, the same seed) and against
    GraphPKU/PiSSA's utils/init_pissa.py run in this process on the same model folder (their
    script loads the folder, initialises through peft and saves adapter and residual)."""
    import copy
    import runpy

    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file

    from backend.core.rng import seeded
    from backend.pissa.adapters import adapt

    tmp = Path(tempfile.mkdtemp(prefix="pissa-official-"))
    model = llama_for_pissa(tmp / "base")
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    rows = []
    for init in ("pissa", "pissa_niter_4"):
        niter = int(init.rsplit("_", 1)[1]) if "niter" in init else None

        def work():
            return adapt(model, "pissa", rank=rank, targets=targets, seed=0, niter=niter)

        def peft_itself():
            with seeded(0):
                return get_peft_model(
                    copy.deepcopy(model),
                    LoraConfig(
                        r=rank, lora_alpha=rank, lora_dropout=0.0, target_modules=targets, init_lora_weights=init
                    ),
                )

        def script():
            out = tmp / init
            argv = sys.argv
            sys.argv = [
                "init_pissa.py",
                "--base_model_path",
                str(tmp / "base"),
                "--output_dir",
                str(out),
                "--bits",
                "fp32",
                "--init_weights",
                init,
                "--lora_r",
                str(rank),
                "--lora_alpha",
                str(rank),
                "--target_modules",
                *targets,
            ]
            try:
                with contextlib.redirect_stdout(open(os.devnull, "w")):
                    runpy.run_path(str(folder / "utils" / "init_pissa.py"), run_name="__main__")
            finally:
                sys.argv = argv
            return out

        def states(pm) -> dict[str, torch.Tensor]:
            """Adapter factors and residual weights by the base model's parameter names."""
            out = {}
            for k, v in pm.state_dict().items():
                k = k.replace("base_model.model.", "").replace(".base_layer", "").replace(".default", "")
                if "lora_" in k or k.endswith("proj.weight"):
                    out[k] = v.float()
            return out

        def script_states(out: Path) -> dict[str, torch.Tensor]:
            ad = {
                k.replace("base_model.model.", ""): v.float()
                for k, v in load_file(out / "pissa_init" / "adapter_model.safetensors").items()
            }
            res = {k: v.float() for k, v in load_file(out / "model.safetensors").items() if k.endswith("proj.weight")}
            return {**ad, **res}

        def largest(a: dict, b: dict) -> str:
            keys = sorted(set(a) & set(b))
            if not keys or len(keys) != len(a):
                return f"{len(keys)}/{len(a)} tensors matched by name"
            # the factors of an SVD are unique up to the sign of each singular pair: compare the
            # adapter's product B·A and the residual, which are not
            prods = [k for k in keys if k.endswith("lora_A.weight")]
            dp = max(
                float((a[k.replace("_A", "_B")] @ a[k] - b[k.replace("_A", "_B")] @ b[k]).abs().max()) for k in prods
            )
            dr = max(float((a[k] - b[k]).abs().max()) for k in keys if "lora_" not in k)
            return f"B·A {dp:.1e}, W_res {dr:.1e}"

        w, o, pw, po = alternate(work, peft_itself, repeats)
        rows.append(
            row(
                "PiSSA",
                f"init {init}, r={rank}, 14 linear layers (Llama 1024×2816, 2 layers) vs peft",
                w,
                o,
                largest(states(pw), states(po)),
            )
        )
        w, o, pw, out = alternate(work, script, repeats)
        rows.append(
            row(
                "PiSSA",
                f"init {init}, same layers, vs GraphPKU/PiSSA utils/init_pissa.py",
                w,
                o,
                largest(states(pw), script_states(out)),
                "their time includes loading the folder and saving adapter + residual",
            )
        )
    return rows
