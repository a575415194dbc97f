"""The llava-scenes-sae organism's steering measurements (backend.zoo.recipes.features): which
features carry each colour, the clamp values calibrated on a split of their own, where the clamp must
sit and the sweeps over clamp settings. Apart from the recipe, which runs them on every candidate
SAE and on the chosen one, so that the build reads as its steps."""

from __future__ import annotations

import numpy as np
import torch

from backend.sae import scenes as S
from backend.sae import vlm

N_STEER = 25  # held-out scenes per colour in each steering measurement


def steering_features(expl, index, min_iou: float = 0.5) -> dict[str, int]:
    """Per colour, the feature to clamp: among the features labelled with that colour at IoU ≥ 0.5, the
    one with the highest mean non-zero activation (the colour's strongest carrier; a colour is often
    split over several features by texture or shape); the best-IoU feature if none qualifies."""
    mean = index.tensors["mean_act"]
    out = {}
    for c in S.COLOURS:
        cands = [f for f, e in expl.items() if e.label == c and e.score >= min_iou]
        out[c] = (
            int(max(cands, key=lambda f: float(mean[f])))
            if cands
            else int(max(expl, key=lambda f: expl[f].scores.get(c, 0.0)))
        )
    return out


def colour_families(expl) -> dict[str, list[int]]:
    return {c: [int(f) for f, e in expl.items() if e.label == c] for c in S.COLOURS}


CALIB_MULTIPLES = (0.75, 0.875, 1.0, 1.125, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0)
N_CALIB = 80


def calibrate_values(
    model, tok, sae, hookpoint, colour_features, max_act, calib, *, positions, multiple, suppress_for=None
) -> dict:
    """Per colour, the clamp value (as a multiple of the feature's max activation) that steers best on
    the calibration split (scenes disjoint from the held-out ones it is reported on); ties go to the
    multiple closest to the sweep's best."""
    from backend.sae import steer as ST

    rows: dict[str, dict[str, float]] = {c: {} for c in colour_features}
    for m in CALIB_MULTIPLES:
        vals = {c: m * float(max_act[f]) for c, f in colour_features.items()}
        r = ST.steering_success(
            model,
            tok,
            sae,
            hookpoint,
            calib,
            colour_features,
            vals,
            positions=positions,
            n=N_CALIB,
            suppress_for=suppress_for,
        )
        for c in colour_features:
            rows[c][f"{m:g}"] = r[c]["success"]
    chosen = {
        c: float(max(CALIB_MULTIPLES, key=lambda m: (rows[c][f"{m:g}"], -abs(m - multiple)))) for c in colour_features
    }
    return {"multiples": chosen, "calibration_success": rows, "n_calib": N_CALIB}


@torch.no_grad()
def placement_study(model, tok, sae, hookpoint, colour_features, max_act, heldout, *, multiple, suppress_for):
    """Where the clamp must sit: the paper's placement (every prompt position) split into its image half
    and its text half (<s> + prompt word), the plain SAE reconstruction at every prompt position (no
    clamp), and per-position reconstruction error and norms."""
    from backend.sae import steer as ST

    out = {"multiple": multiple, "clamp": {}}
    for mode in ("image", "text", "prompt"):
        vals = {c: multiple * float(max_act[f]) for c, f in colour_features.items()}
        r = ST.steering_success(
            model,
            tok,
            sae,
            hookpoint,
            heldout,
            colour_features,
            vals,
            positions=mode,
            n=N_STEER,
            suppress_for=suppress_for,
        )
        out["clamp"][mode] = {c: {k: v[k] for k in ("success", "malformed", "example")} for c, v in r.items()}
        print("placement", mode, {c: v["success"] for c, v in r.items()}, flush=True)
    specs = heldout[:64]
    imgs = np.stack([S.render(s)[0] for s in specs])
    h = next(iter(vlm.residuals(model, tok, imgs, hookpoint)))[1]
    sl = vlm.image_slice(model)
    rec = sae(h)
    pos: dict[str, tuple[slice, int | slice]] = {
        "bos": (slice(None), 0),
        "image": (slice(None), sl),
        "prompt_word": (slice(None), -1),
    }
    out["reconstruction"] = {
        k: {
            "norm": round(float(h[ix].norm(dim=-1).mean()), 3),
            "error_norm": round(float((h[ix] - rec[ix]).norm(dim=-1).mean()), 3),
            "relative_error": round(float((h[ix] - rec[ix]).pow(2).sum() / h[ix].pow(2).sum()), 4),
        }
        for k, ix in pos.items()
    }

    def recon_only(x):
        return sae(x).to(x.dtype) if x.shape[-2] > 1 else None

    with vlm.edit_residual(model, hookpoint, recon_only):
        caps = vlm.generate_captions(model, tok, imgs)
    out["reconstruction_only_prompt"] = {
        "colour_acc": float(np.mean([S.attribute_accuracy(c, s)["colour"] for c, s in zip(caps, specs)])),
        "malformed": float(np.mean([S.parse_caption(c) is None for c in caps])),
        "n": len(specs),
    }
    word = out["reconstruction"]["prompt_word"]["norm"]
    val = float(np.mean([multiple * float(max_act[f]) for f in colour_features.values()]))
    out["why"] = (
        f"The clamp value is on the image-feature scale (mean {val:.0f}); image-token residuals here have norm "
        f"{out['reconstruction']['image']['norm']:.0f}, the text positions only "
        f"{out['reconstruction']['bos']['norm']:.1f} (<s>) and {word:.1f} (prompt word). Writing the colour "
        f"direction at that value into the text positions overwrites the state that decides the first caption "
        f"words, so the caption is malformed (text-only clamp: min success "
        f"{min(v['success'] for v in out['clamp']['text'].values()):.2f}, malformed "
        f"{np.mean([v['malformed'] for v in out['clamp']['text'].values()]):.2f}); the SAE reconstruction "
        f"itself at every prompt position, without a clamp, keeps most captions right (colour accuracy "
        f"{out['reconstruction_only_prompt']['colour_acc']:.2f}, malformed "
        f"{out['reconstruction_only_prompt']['malformed']:.2f}). The image positions carry the colour that "
        f"the caption reads through attention: clamping there alone steers."
    )
    return out


def steering_sweep(model, tok, sae, hookpoint, colour_features, max_act, heldout, configs, suppress_for=None):
    """configs: (positions, value multiple of the feature's max activation, suppress other colours?)."""
    from backend.sae import steer as ST

    res = {}
    for mode, m, sup in configs:
        vals = {c: m * float(max_act[f]) for c, f in colour_features.items()}
        r = ST.steering_success(
            model,
            tok,
            sae,
            hookpoint,
            heldout,
            colour_features,
            vals,
            positions=mode,
            n=N_STEER,
            suppress_for=suppress_for if sup else None,
        )
        key = f"{mode}@{m:g}x" + ("+suppress" if sup else "")
        res[key] = {
            "positions": mode,
            "multiple": m,
            "suppress_other_colours": sup,
            "min_success": min(v["success"] for v in r.values()),
            "per_colour": r,
        }
        print(key, {c: v["success"] for c, v in r.items()}, flush=True)
    return res
