"""Write tests/fixtures/sae/: tiny SAEs saved by eai-sparsify 1.3.3 and sae-lens 6.54.12 with their
own save functions, plus input activations and the libraries' own codes and reconstructions.

The workbench does not depend on either library; this script runs once, in a separate venv:

    python3 -m venv /tmp/sae-venv
    /tmp/sae-venv/bin/pip install torch==2.13.0 eai-sparsify==1.3.3 sae-lens==6.54.12
    /tmp/sae-venv/bin/python scripts/make_sae_fixtures.py

and the SAELens 5.x cases (TopK as `standard` with `activation_fn_str: topk`, as 5.x wrote it) from a
second venv with `sae-lens<6` (5.11.0), added to the same folder:

    /tmp/sae5-venv/bin/python scripts/make_sae_fixtures.py --saelens5

Each case is a folder `<case>/` holding what the library wrote, and `<case>.ref.safetensors` with
`x` (inputs), `codes` (dense codes) and `recon` as the library computes them after loading the
folder with its own loader. `cases.json` says, per case, which library, architecture and hookpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("SPARSIFY_DISABLE_TRITON", "1")
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "sae"
D_IN, N_LAT, N_X = 16, 64, 24


def perturb(module, seed):
    """Random weights, with decoder norms away from 1 and biases non-zero, so that folding and bias
    handling are exercised."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(module.named_parameters()):
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name in ("threshold", "log_threshold"):
                continue
            p.copy_(0.3 * r if p.ndim == 1 else r / p.shape[-1] ** 0.5)
        if hasattr(module, "W_dec") and module.W_dec is not None:
            scale = 0.5 + torch.rand(module.W_dec.shape[0], 1, generator=g) * 1.5
            module.W_dec.mul_(scale)


def inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N_X, D_IN, generator=g) * 1.5 + 0.2


def write_ref(case, x, codes, recon, meta, cases):
    save_file(
        {
            "x": x.contiguous(),
            "codes": codes.detach().contiguous().float(),
            "recon": recon.detach().contiguous().float(),
        },
        str(OUT / f"{case}.ref.safetensors"),
    )
    cases[case] = meta


# ------------------------------------------------------------------ sparsify
def sparsify_cases(cases):
    from sparsify import SparseCoder, SparseCoderConfig, TrainConfig

    def dense(acts, idx):
        return torch.zeros(acts.shape[0], N_LAT).scatter_(-1, idx, acts)

    for case, cfg, hookpoints in (
        ("sparsify_topk", SparseCoderConfig(num_latents=N_LAT, k=4), ["layers.3", "layers.5"]),
        ("sparsify_groupmax", SparseCoderConfig(num_latents=N_LAT, k=8, activation="groupmax"), ["layers.2"]),
        ("sparsify_skip", SparseCoderConfig(num_latents=N_LAT, k=4, skip_connection=True), ["layers.1"]),
        ("sparsify_transcoder", SparseCoderConfig(num_latents=N_LAT, k=4, transcode=True), ["layers.1"]),
    ):
        # the trainer's layout: one folder per hookpoint, named for it, cfg.json without a hookpoint
        for j, hp in enumerate(hookpoints):
            sae = SparseCoder(D_IN, cfg)
            perturb(sae, 100 + j + len(cases) * 10)
            sae.save_to_disk(OUT / case / hp)
        # the trainer's run folder also holds its TrainConfig as config.json (state *.pt files are dropped)
        TrainConfig(cfg, hookpoints=hookpoints, log_to_wandb=False).save_json(OUT / case / "config.json")
        hp = hookpoints[0]
        sae = SparseCoder.load_from_disk(OUT / case / hp)
        x = inputs(len(cases))
        with torch.no_grad():
            enc = sae.encode(x)
            out = sae(x)
        write_ref(
            case,
            x,
            dense(enc.top_acts, enc.top_indices),
            out.sae_out,
            {
                "library": "eai-sparsify 1.3.3",
                "architecture": cfg.activation,
                "folder": f"{case}",
                "hookpoint": hp,
                "hookpoints": hookpoints,
                "loads": not (cfg.skip_connection or cfg.transcode),
            },
            cases,
        )


# ------------------------------------------------------------------ SAELens
def saelens_cases(cases):
    import sae_lens as SL
    from sae_lens import SAE
    from sae_lens.saes import (
        BatchTopKTrainingSAE,
        BatchTopKTrainingSAEConfig,
        GatedSAE,
        GatedSAEConfig,
        JumpReLUSAE,
        JumpReLUSAEConfig,
        JumpReLUTrainingSAE,
        JumpReLUTrainingSAEConfig,
        MatchingPursuitSAE,
        MatchingPursuitSAEConfig,
        StandardSAE,
        StandardSAEConfig,
        TopKSAE,
        TopKSAEConfig,
        TopKTrainingSAE,
        TopKTrainingSAEConfig,
    )
    from sae_lens.saes.sae import SAEMetadata

    def meta(hook):
        return SAEMetadata(hook_name=hook, model_name="tiny")

    def threshold(sae, seed):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            sae.threshold.copy_(torch.rand(N_LAT, generator=g) * 0.4)

    def batch_threshold(sae, seed):
        sae.topk_threshold = torch.tensor(0.15, dtype=torch.double)

    specs = [
        (
            "saelens_topk",
            TopKSAE,
            TopKSAEConfig(d_in=D_IN, d_sae=N_LAT, k=5, metadata=meta("blocks.3.hook_resid_post")),
            "save_model",
            None,
            True,
        ),
        (
            "saelens_topk_train_rescale",
            TopKTrainingSAE,
            TopKTrainingSAEConfig(
                d_in=D_IN,
                d_sae=N_LAT,
                k=5,
                rescale_acts_by_decoder_norm=True,
                metadata=meta("blocks.3.hook_resid_post"),
            ),
            "save_model",
            None,
            True,
        ),
        (
            "saelens_topk_train_rescale_inference",
            TopKTrainingSAE,
            TopKTrainingSAEConfig(
                d_in=D_IN,
                d_sae=N_LAT,
                k=5,
                rescale_acts_by_decoder_norm=True,
                metadata=meta("blocks.3.hook_resid_post"),
            ),
            "save_inference_model",
            None,
            True,
        ),
        (
            "saelens_standard",
            StandardSAE,
            StandardSAEConfig(d_in=D_IN, d_sae=N_LAT, metadata=meta("blocks.2.hook_resid_post")),
            "save_model",
            None,
            True,
        ),
        (
            "saelens_jumprelu",
            JumpReLUSAE,
            JumpReLUSAEConfig(d_in=D_IN, d_sae=N_LAT, metadata=meta("blocks.4.hook_resid_pre")),
            "save_model",
            threshold,
            True,
        ),
        (
            "saelens_jumprelu_train",
            JumpReLUTrainingSAE,
            JumpReLUTrainingSAEConfig(d_in=D_IN, d_sae=N_LAT, metadata=meta("blocks.4.hook_resid_post")),
            "save_model",
            threshold,
            True,
        ),
        (
            "saelens_jumprelu_nobdec",
            JumpReLUSAE,
            JumpReLUSAEConfig(
                d_in=D_IN, d_sae=N_LAT, apply_b_dec_to_input=False, metadata=meta("blocks.6.hook_resid_post")
            ),
            "save_model",
            threshold,
            True,
        ),
        (
            "saelens_batchtopk",
            BatchTopKTrainingSAE,
            BatchTopKTrainingSAEConfig(d_in=D_IN, d_sae=N_LAT, k=4.0, metadata=meta("blocks.1.hook_resid_post")),
            "save_inference_model",
            batch_threshold,
            True,
        ),
        (
            "saelens_batchtopk_train",
            BatchTopKTrainingSAE,
            BatchTopKTrainingSAEConfig(d_in=D_IN, d_sae=N_LAT, k=4.0, metadata=meta("blocks.1.hook_resid_post")),
            "save_model",
            batch_threshold,
            False,
        ),
        (
            "saelens_gated",
            GatedSAE,
            GatedSAEConfig(d_in=D_IN, d_sae=N_LAT, metadata=meta("blocks.5.hook_resid_post")),
            "save_model",
            None,
            True,
        ),
        (
            "saelens_matching_pursuit",
            MatchingPursuitSAE,
            MatchingPursuitSAEConfig(d_in=D_IN, d_sae=N_LAT, metadata=meta("blocks.2.hook_resid_post")),
            "save_model",
            None,
            True,
        ),
    ]
    for i, (case, cls, cfg, saver, extra, loads) in enumerate(specs):
        sae = cls(cfg)
        perturb(sae, 200 + i)
        if extra is not None:
            extra(sae, 300 + i)
        getattr(sae, saver)(OUT / case)
        arch = json.loads((OUT / case / "cfg.json").read_text())["architecture"]
        x = inputs(50 + i)
        try:  # the library's own loader: SAE.load_from_disk reads inference checkpoints and training ones alike
            ref = SAE.load_from_disk(OUT / case)
        except Exception as e:  # a training-only architecture: SAELens itself does not load it for inference
            print(f"{case}: SAELens does not load it ({type(e).__name__}: {e})", file=sys.stderr)
            ref = None
        if ref is None:
            write_ref(
                case,
                x,
                torch.zeros(N_X, N_LAT),
                torch.zeros(N_X, D_IN),
                {
                    "library": f"sae-lens {SL.__version__}",
                    "architecture": arch,
                    "folder": case,
                    "hookpoint": cfg.metadata.hook_name,
                    "loads": False,
                    "saelens_loads": False,
                },
                cases,
            )
            continue
        with torch.no_grad():
            codes = ref.encode(x)
            recon = ref.decode(codes)
        write_ref(
            case,
            x,
            codes,
            recon,
            {
                "library": f"sae-lens {SL.__version__}",
                "architecture": arch,
                "folder": case,
                "hookpoint": cfg.metadata.hook_name,
                "loads": loads,
                "saelens_loads": True,
            },
            cases,
        )


def gemma_scope_case(cases):
    """Gemma Scope 2's own layout (params.safetensors with lower-case w_enc/w_dec/b_enc/b_dec/threshold
    beside config.json), with SAELens's JumpReLU configured as its Gemma Scope loader configures it
    (apply_b_dec_to_input=False) as the reference."""
    from sae_lens.saes import JumpReLUSAE, JumpReLUSAEConfig
    from sae_lens.saes.sae import SAEMetadata

    sae = JumpReLUSAE(
        JumpReLUSAEConfig(
            d_in=D_IN,
            d_sae=N_LAT,
            apply_b_dec_to_input=False,
            metadata=SAEMetadata(hook_name="blocks.7.hook_resid_post"),
        )
    )
    perturb(sae, 400)
    with torch.no_grad():
        sae.threshold.copy_(torch.rand(N_LAT, generator=torch.Generator().manual_seed(401)) * 0.4)
    folder = OUT / "gemmascope" / "resid_post" / "layer_7_width_64_l0_small"
    folder.mkdir(parents=True, exist_ok=True)
    save_file(
        {
            "w_enc": sae.W_enc.detach().contiguous(),
            "w_dec": sae.W_dec.detach().contiguous(),
            "b_enc": sae.b_enc.detach().contiguous(),
            "b_dec": sae.b_dec.detach().contiguous(),
            "threshold": sae.threshold.detach().contiguous(),
        },
        str(folder / "params.safetensors"),
    )
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architecture": "jump_relu",
                "model_name": "gemma-v3-tiny-pt",
                "hf_hook_point_in": "model.layers.7.output",
                "hf_hook_point_out": "model.layers.7.output",
                "width": N_LAT,
                "l0": "small",
                "type": "sae",
            }
        )
    )
    x = inputs(99)
    with torch.no_grad():
        codes = sae.encode(x)
        recon = sae.decode(codes)
    write_ref(
        "gemmascope",
        x,
        codes,
        recon,
        {
            "library": "Gemma Scope 2 layout, sae-lens JumpReLU reference",
            "architecture": "jumprelu",
            "folder": "gemmascope/resid_post/layer_7_width_64_l0_small",
            "hookpoint": "model.layers.7",
            "loads": True,
        },
        cases,
    )


def saelens5_cases(cases):
    """SAELens 5.x's single SAE class, saved with its own save_model and read back with its own loader."""
    import sae_lens as SL
    from sae_lens import SAE, SAEConfig

    assert SL.__version__.startswith("5."), SL.__version__
    for i, (case, fn, kwargs, layer) in enumerate(
        (("saelens5_topk", "topk", {"k": 4}, 2), ("saelens5_standard", "relu", {}, 3))
    ):
        cfg = SAEConfig(
            architecture="standard",
            d_in=D_IN,
            d_sae=N_LAT,
            activation_fn_str=fn,
            activation_fn_kwargs=kwargs,
            apply_b_dec_to_input=True,
            finetuning_scaling_factor=False,
            context_size=128,
            model_name="tiny",
            hook_name=f"blocks.{layer}.hook_resid_post",
            hook_layer=layer,
            hook_head_index=None,
            prepend_bos=True,
            dataset_path="none",
            dataset_trust_remote_code=False,
            normalize_activations="none",
            dtype="float32",
            device="cpu",
            sae_lens_training_version=SL.__version__,
        )
        sae = SAE(cfg)
        perturb(sae, 500 + i)
        sae.save_model(OUT / case)
        ref = SAE.load_from_disk(OUT / case)
        x = inputs(70 + i)
        with torch.no_grad():
            codes = ref.encode(x)
            recon = ref.decode(codes)
        write_ref(
            case,
            x,
            codes,
            recon,
            {
                "library": f"sae-lens {SL.__version__}",
                "architecture": "topk" if fn == "topk" else "standard",
                "folder": case,
                "hookpoint": cfg.hook_name,
                "loads": True,
                "saelens_loads": True,
            },
            cases,
        )


def main():
    if "--saelens5" in sys.argv:
        cases = json.loads((OUT / "cases.json").read_text())
        saelens5_cases(cases)
        (OUT / "cases.json").write_text(json.dumps(cases, indent=1, sort_keys=True) + "\n")
        return
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    torch.manual_seed(0)
    cases: dict = {}
    sparsify_cases(cases)
    saelens_cases(cases)
    gemma_scope_case(cases)
    # training leftovers the libraries write beside the weights are not part of an SAE
    for junk in OUT.rglob("*.pt"):
        junk.unlink()
    (OUT / "cases.json").write_text(json.dumps(cases, indent=1, sort_keys=True) + "\n")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"{len(cases)} cases, {total / 1024:.0f} KiB in {OUT}")


if __name__ == "__main__":
    main()
