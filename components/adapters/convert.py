"""The words of the Adapters tab's PiSSA → LoRA conversion check: a verdict that claims "the same
outputs" only within the weights' dtype bound (backend.pissa.conversion.conversion_tolerance)."""

from __future__ import annotations

import html


def verdict(r: dict) -> str:
    """ "the same outputs" within the bound; "close, not the same" where the difference is over the
    bound but well under what the fine-tuning changed (the conversion kept the fine-tuning, yet the
    outputs moved more than round-off explains); else "NOT the same outputs"."""
    rel, change = r["rel_diff"], r["change_from_base"] / r["output_scale"]
    if rel <= r["tolerance"]:
        return "the same outputs"
    if rel < 0.5 * change:
        return "close, but not the same outputs"
    return "NOT the same outputs!"


def conversion_md(r: dict) -> str:
    half = r["dtype"] in ("float16", "bfloat16")
    change = r["change_from_base"] / r["output_scale"]
    word = verdict(r)
    if half:
        why = (
            f"Tolerance {r['tolerance']:.1e} = 4 machine epsilons of {r['dtype']}, the weights' dtype: "
            f"the PiSSA model stores W_res = W − AB rounded to {r['dtype']}, which already shifts its "
            f"outputs by {r['roundoff_at_init']:.1e} (relative) from the base model's before any "
            f"training; that round-off grows slowly with depth (about 2.5 epsilons at 32 layers)."
        )
    else:
        why = (
            f"Tolerance {r['tolerance']:.0e} for {r['dtype']} weights (their round-off at step 0: "
            f"{r['roundoff_at_init']:.1e})."
        )
    if word.startswith("close"):
        why = (
            f"The difference is over the tolerance, so the converted model does not reproduce the "
            f"fine-tuned one to {r['dtype']} round-off (outputs move by up to {r['max_abs_diff']:.2g}); it "
            f"is still far below the fine-tuning's own change ({change:.1e} relative). " + why
        )
    why += (
        f" A wrong conversion would be off by about as much as the fine-tuning moved the outputs "
        f"({change:.1e} relative)"
        + (
            ", under twice the tolerance here: take more steps for a telling check."
            if change <= 2 * r["tolerance"]
            else "."
        )
    )
    return (
        f"PiSSA fine-tuned {html.escape(', '.join(r['layers']))} for {r['steps']} "
        f"step{'s' if r['steps'] != 1 else ''} (rank {r['rank']}). peft converted it to a plain "
        f"**LoRA of rank {r['converted_rank']}** on the *original* weights W. On {r['n_inputs']} inputs the "
        f"two models differ by at most **{r['max_abs_diff']:.2e}** (relative **{r['rel_diff']:.1e}**, "
        f"tolerance {r['tolerance']:.1e}): **{word}**  \n{why}"
    )
