"""Features organism: captioned scenes with planted concept masks, a tiny LLaVA that captions them,
and a TopK SAE on one residual-stream site of its LM with a feature index.

    llava-scenes      LlavaForConditionalGeneration (3-layer CLIP tower, 2-layer Llama, d=64) +
                      processor + tokenizer; held-out scene specs (heldout.json).
    llava-scenes-sae  the SAE (EleutherAI sparsify layout) + its feature index (safetensors) +
                      concept labels; built from the committed llava-scenes.

The captioner is trained with the caption loss plus a small dense auxiliary loss: a linear head on
the LM input at every image position predicts the colour / shape / texture of the object under that
patch. That plants the concepts locally (so a feature can be checked against a mask); the head is
discarded and the saved model is an ordinary LLaVA. A second, weaker auxiliary term writes each of
those concepts along a fixed direction of its own at the SAE's site (SITE_PLANT), so that every shape,
circle included, has a feature of its own to find. Half of each batch is also fed a wrong image up to
the SAE's site (layer 0's output at the image positions is swapped back to the right one), so the caption
is read from the image positions after that site, as a real LLaVA reads its objects in its middle layers:
a clamp there can change any attribute, a shape as well as a colour. The SAE's steering measurements (which features
carry a colour, the calibrated clamp values, the sweeps) are in features_steering.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from backend.sae import scenes as S
from backend.sae import vlm
from backend.zoo.registry import recipe

from .features_contrast import scene_activations as contrast_acts
from .features_contrast import top2_precision
from .features_site import SITE_PLANT, SITE_WEIGHT, concept_directions, site_loss, swapped_at
from .features_steering import (
    N_STEER,
    calibrate_values,
    colour_families,
    floor_of,
    placement_study,
    steering_features,
    steering_sweep,
)

N_HELDOUT = 256


def _eval_captions(model, tok, specs):
    imgs = np.stack([S.render(s)[0] for s in specs])
    model.eval()
    preds = vlm.generate_captions(model, tok, imgs)
    model.train()
    accs = [S.attribute_accuracy(p, s) for p, s in zip(preds, specs)]
    return {k: float(np.mean([a[k] for a in accs])) for k in accs[0]}, preds


@recipe(
    "llava-scenes",
    seed=1234,
    model_class="transformers.LlavaForConditionalGeneration",
    description="tiny LLaVA captioning synthetic scenes (planted colour/shape/texture/position masks)",
    default_steps=2600,
)
def train_captioner(out_dir: Path, *, seed: int, steps: int | None) -> dict:
    steps = int(steps or 2600)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    tok = vlm.make_tokenizer()
    proc = vlm.make_processor(tok)
    model = vlm.make_model(tok)
    d = model.config.text_config.hidden_size
    heads = nn.ModuleDict({fam: nn.Linear(d, len(S.FAMILIES[fam]) + 1) for fam in ("colour", "shape", "texture")})
    params = list(model.parameters()) + list(heads.parameters())
    lr, warm, bs = 3e-3, min(100, max(1, steps // 10)), 32
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
    )
    img_pos = vlm.image_slice(model)
    directions = concept_directions(d, seed)
    # Half of each batch sees a wrong image up to the SAE's site, and the right one after it: rows
    # [0, bs/2) are fed their neighbour's image, and layer 0's output at the image positions is
    # swapped back to their own. Layer 0's reads from the image are then unreliable, so the caption
    # is read after the SAE's site, as in a real LLaVA whose middle layers carry the objects; a clamp
    # there can change any attribute (a shape too), not only the ones read late.
    half = bs // 2
    fed = torch.cat([torch.roll(torch.arange(half), 1), torch.arange(half, bs)])
    back = torch.argsort(fed)
    layer0 = model.model.language_model.layers[0]
    heldout = [S.sample_spec(np.random.default_rng(seed + 10_000 + i)) for i in range(N_HELDOUT)]
    log = []
    t0 = time.perf_counter()
    model.train()
    for step in range(steps):
        specs, imgs = S.batch(rng, bs)
        batch = vlm.training_batch(tok, model, specs, imgs[fed.numpy()])
        site: list[torch.Tensor] = []  # layer 0's output at the image positions, each row's own image
        with swapped_at(layer0, img_pos, back, site):
            out = model(**batch, output_hidden_states=True)
        h = out.hidden_states[0][:, img_pos]  # LM input at image positions (of the image fed)
        own = vlm.patch_targets(specs)  # per patch of the image each row is captioned with
        tgt = {f: t[fed] for f, t in own.items()}
        aux = sum(nn.functional.cross_entropy(heads[f](h).flatten(0, 1), tgt[f].flatten()) for f in heads)
        assert isinstance(aux, torch.Tensor)  # a sum over the (three) heads, never the empty sum's 0
        aux = aux + SITE_WEIGHT * site_loss(site[0], own, directions)
        loss = out.loss + 0.5 * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            log.append(
                {
                    "step": step,
                    "caption_loss": round(out.loss.item(), 4),
                    "aux_loss": round(aux.item(), 4),
                    "t": round(time.perf_counter() - t0, 1),
                }
            )
            print(json.dumps(log[-1]), flush=True)
    model.eval()
    acc, preds = _eval_captions(model, tok, heldout)
    model.save_pretrained(out_dir, safe_serialization=True)
    proc.save_pretrained(out_dir)
    (out_dir / "heldout.json").write_text(json.dumps({"scenes": heldout}))
    (out_dir / "train_log.json").write_text(json.dumps(log))
    examples = [{"truth": S.caption(s), "pred": p} for s, p in list(zip(heldout, preds))[:8]]
    return {
        "steps": steps,
        "metrics": {f"heldout_{k}_acc": round(v, 4) for k, v in acc.items()},
        "n_heldout": N_HELDOUT,
        "examples": examples,
        "aux_loss": "dense per-patch colour/shape/texture head on the LM input (discarded); "
        f"the same concepts along fixed directions at layer 0's output (x{SITE_PLANT:g}, weight {SITE_WEIGHT:g})",
    }


# --------------------------------------------------------------------------------------------- SAE
SAE_HOOKPOINT = "model.language_model.layers.0"  # the residual stream after the LM's first decoder layer
ALT_HOOKPOINT = "model.language_model.layers.0:input"  # the LM input, for the steering-site comparison
SAE_LATENTS, SAE_K = 64, 4
# The paper draws 5 random images per feature; the recipe takes the mean that estimates, over all its
# N_RANDOM random scenes (on this organism 5 draws spread the ratio from 2.4 to 4.6, 5th to 95th percentile)
N_TRAIN_SCENES, N_VALID_SCENES, N_INDEX_SCENES, N_RANDOM = 1000, 200, 2048, 200
N_SEEDS = 20
MIN_CANDIDATE_RATIO = 3.0  # top images against random ones, the paper statistic's mean over N_RANDOM scenes
MIN_CONTRAST_PRECISION = 0.9  # top-2 precision of the planted features over the colour and shape pairs
TEST_PROTOCOL = {"start": 100, "n": 12}  # tests/organisms/test_features.py: heldout[100:], 12 scenes per colour


def _scene_specs(seed: int, n: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [S.sample_spec(rng) for _ in range(n)]


def _activations(model, tok, specs, hookpoint):
    imgs = np.stack([S.render(s)[0] for s in specs])
    return torch.cat([h.reshape(-1, h.shape[-1]) for _, h in vlm.residuals(model, tok, imgs, hookpoint)])


def _random_maps(model, tok, sae, specs, hookpoint):
    imgs = np.stack([S.render(s)[0] for s in specs])
    g = int(round(vlm.n_image_tokens(model) ** 0.5))
    out = []
    for _, h in vlm.residuals(model, tok, imgs, hookpoint):
        z = sae.encode(h[:, vlm.image_slice(model)])  # [b, P, F]
        out.append(z.permute(0, 2, 1).reshape(z.shape[0], -1, g, g))
    return torch.cat(out)


def fit_site(model, tok, hookpoint, *, seed, steps, log=print):
    from backend.sae.train import evaluate, train_sae

    tr = _activations(model, tok, _scene_specs(seed + 1, N_TRAIN_SCENES), hookpoint)
    va = _activations(model, tok, _scene_specs(seed + 2, N_VALID_SCENES), hookpoint)
    sae, hist = train_sae(
        tr,
        n_latents=SAE_LATENTS,
        k=SAE_K,
        steps=steps,
        batch=1024,
        lr=2e-3,
        seed=seed,
        hookpoint=hookpoint,
        log=lambda r: log(json.dumps(r)),
    )
    return sae, evaluate(sae, va), hist


@recipe(
    "llava-scenes-sae",
    seed=4321,
    model_class="backend.sae.formats.SAEFolder",
    description="TopK SAE on llava-scenes' LM layer 0 output + feature index + concept labels + steering test",
    default_steps=1500,
)
def train_scene_sae(out_dir: Path, *, seed: int, steps: int | None) -> dict:
    from backend.sae import explain as E
    from backend.sae import steer as ST
    from backend.sae.index import INDEX_FILE, build_index
    from backend.zoo import zoo_path
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    steps = int(steps or 1500)
    # the captioner built beside this organism (same root), else the committed one
    cap_dir = (
        zoo_path("llava-scenes", out_dir.parent)
        if (out_dir.parent / "llava-scenes").exists()
        else zoo_path("llava-scenes")
    )
    model = LlavaForConditionalGeneration.from_pretrained(cap_dir, use_safetensors=True).eval()
    tok = AutoProcessor.from_pretrained(cap_dir).tokenizer
    heldout = vlm.load_scene_set(cap_dir)
    t0 = time.perf_counter()
    # Several seeds. A candidate is eligible with ≤ 10 % dead latents, top images that beat random ones
    # by MIN_CANDIDATE_RATIO, and the planted features of both concepts first in the contrasts of the
    # colour and shape pairs (MIN_CONTRAST_PRECISION, features_contrast), all on the index's scenes; of
    # those, keep the SAE whose colour features steer best on a calibration split (disjoint from the
    # held-out scenes the steering is reported on; each colour at its best calibrated clamp value).
    # Only eligible candidates are calibrated: their captions are most of a candidate's cost.
    specs = _scene_specs(seed + 3, N_INDEX_SCENES)
    calib = _scene_specs(seed + 5, 200)
    crnd = _scene_specs(seed + 4, N_RANDOM)
    candidates, best_score = [], None
    for s_ in range(N_SEEDS):
        cand, cev, chist = fit_site(model, tok, SAE_HOOKPOINT, seed=seed + 100 * s_, steps=steps)
        cidx = build_index(model, tok, cand, specs, hookpoint=SAE_HOOKPOINT, top_k=16)
        cexpl = E.explain_all(cidx, specs)
        cmaps = _random_maps(model, tok, cand, crnd, SAE_HOOKPOINT)
        cbase = E.random_baseline(cidx, cexpl, crnd, cmaps, top_n_features=50, n_random=N_RANDOM, seed=seed)
        cprec, chits = top2_precision(
            {str(f): e.to_dict() for f, e in cexpl.items()},
            contrast_acts(model, tok, cand, SAE_HOOKPOINT, specs),
            specs,
        )
        eligible = (
            cev["dead_fraction"] <= 0.10 and cbase["ratio"] >= MIN_CANDIDATE_RATIO and cprec >= MIN_CONTRAST_PRECISION
        )
        cbest, cmult = [], {}
        if eligible:
            cfams = colour_families(cexpl)
            ccal = calibrate_values(
                model,
                tok,
                cand,
                SAE_HOOKPOINT,
                steering_features(cexpl, cidx),
                cidx.tensors["max_act"],
                calib,
                positions="active",
                multiple=1.5,
                multiples=(1.0, 1.5, 2.0),  # a coarse grid ranks the candidates; the chosen one is calibrated finely
                suppress_for={c: [f for cc, fs in cfams.items() if cc != c for f in fs] for c in S.COLOURS},
            )
            cbest = [ccal["calibration_success"][c][f"{m:g}"] for c, m in ccal["multiples"].items()]
            cmult = ccal["multiples"]
        score = (eligible, min(cbest, default=0.0), float(np.mean(cbest)) if cbest else 0.0, cprec)
        candidates.append(
            {
                "seed": seed + 100 * s_,
                "dead": cev["dead_fraction"],
                "fvu": cev["fvu"],
                "calib_min_success": min(cbest, default=None),
                "calib_multiples": cmult,
                "iou_ratio_vs_random": cbase["ratio"],
                "contrast_precision": cprec,
                "contrast_hits": chits,
                "score": score,
            }
        )
        print("candidate", candidates[-1], flush=True)
        if best_score is None or score > best_score:
            best_score, sae, ev, hist = score, cand, cev, chist
    t_sae = time.perf_counter() - t0
    sae.save(out_dir, layout="sparsify")
    t1 = time.perf_counter()
    index = build_index(model, tok, sae, specs, hookpoint=SAE_HOOKPOINT, top_k=16)
    index.meta["scene_file"] = "index_scenes.json"
    index.save(out_dir / INDEX_FILE)
    t_index = time.perf_counter() - t1
    expl = E.explain_all(index, specs)
    loc = E.localisation_summary(expl)
    rnd_specs = _scene_specs(seed + 4, N_RANDOM)
    rmaps = _random_maps(model, tok, sae, rnd_specs, SAE_HOOKPOINT)
    baseline = E.random_baseline(index, expl, rnd_specs, rmaps, top_n_features=50, n_random=N_RANDOM, seed=seed)
    colour_features = steering_features(expl, index)
    fams = colour_families(expl)
    suppress_for = {c: [f for cc, fs in fams.items() if cc != c for f in fs] for c in S.COLOURS}
    max_act = index.tensors["max_act"]
    configs = [
        ("prompt", 1.0, False),
        ("prompt", 1.5, False),
        ("all", 1.5, False),
        ("image", 1.0, False),
        ("image", 1.5, False),
        ("image", 1.0, True),
        ("image", 1.5, True),
        ("image", 2.0, True),
        ("image", 2.5, True),
        ("active", 1.0, True),
        ("active", 1.5, True),
        ("active", 2.0, True),
    ]
    # The setting is chosen on the calibration split; the held-out sweep is only reported.
    calib_sweep = steering_sweep(model, tok, sae, SAE_HOOKPOINT, colour_features, max_act, calib, configs, suppress_for)
    best_key = max(
        calib_sweep,
        key=lambda k: (
            calib_sweep[k]["min_success"],
            np.mean([v["success"] for v in calib_sweep[k]["per_colour"].values()]),
        ),
    )
    sweep = steering_sweep(model, tok, sae, SAE_HOOKPOINT, colour_features, max_act, heldout, configs, suppress_for)
    best = sweep[best_key]
    sup_best = suppress_for if best["suppress_other_colours"] else None
    cal = calibrate_values(
        model,
        tok,
        sae,
        SAE_HOOKPOINT,
        colour_features,
        max_act,
        calib,
        positions=best["positions"],
        multiple=best["multiple"],
        suppress_for=sup_best,
    )
    cal_vals = {c: cal["multiples"][c] * float(max_act[f]) for c, f in colour_features.items()}
    cal_res = ST.steering_success(
        model,
        tok,
        sae,
        SAE_HOOKPOINT,
        heldout,
        colour_features,
        cal_vals,
        positions=best["positions"],
        n=N_STEER,
        suppress_for=sup_best,
        floor=floor_of(max_act),
    )
    calibrated = {
        "positions": best["positions"],
        "suppress_other_colours": best["suppress_other_colours"],
        **cal,
        "min_success": min(v["success"] for v in cal_res.values()),
        "per_colour": cal_res,
    }
    print("calibrated", cal["multiples"], {c: v["success"] for c, v in cal_res.items()}, flush=True)
    placement = placement_study(
        model,
        tok,
        sae,
        SAE_HOOKPOINT,
        colour_features,
        max_act,
        heldout,
        multiple=best["multiple"],
        suppress_for=suppress_for,
    )
    # The organism test's own protocol, recorded so a run can be compared with the build.
    tp = {}
    for name, mult in (("best", {c: best["multiple"] for c in colour_features}), ("calibrated", cal["multiples"])):
        r = ST.steering_success(
            model,
            tok,
            sae,
            SAE_HOOKPOINT,
            heldout[TEST_PROTOCOL["start"] :],
            colour_features,
            {c: mult[c] * float(max_act[f]) for c, f in colour_features.items()},
            positions=best["positions"],
            n=TEST_PROTOCOL["n"],
            suppress_for=sup_best,
            floor=floor_of(max_act),
        )
        tp[name] = {c: v["success"] for c, v in r.items()}
    test_protocol = {**TEST_PROTOCOL, "success": tp}
    # The same measurement with an SAE on the LM input (residual stream entering layer 0).
    alt_sae, alt_ev, _ = fit_site(model, tok, ALT_HOOKPOINT, seed=seed, steps=steps, log=lambda s: None)
    alt_index = build_index(model, tok, alt_sae, specs[:1024], hookpoint=ALT_HOOKPOINT, top_k=8)
    alt_expl = E.explain_all(alt_index, specs[:1024])
    alt_loc = E.localisation_summary(alt_expl, concepts=tuple(S.COLOURS))
    alt_fams = colour_families(alt_expl)
    alt_sweep = steering_sweep(
        model,
        tok,
        alt_sae,
        ALT_HOOKPOINT,
        steering_features(alt_expl, alt_index),
        alt_index.tensors["max_act"],
        heldout,
        [("prompt", best["multiple"], False), (best["positions"], best["multiple"], best["suppress_other_colours"])],
        {c: [f for cc, fs in alt_fams.items() if cc != c for f in fs] for c in S.COLOURS},
    )
    # Why text positions break: the residual norms of image vs text positions at each site.
    h = next(vlm.residuals(model, tok, np.stack([S.render(s)[0] for s in specs[:32]]), SAE_HOOKPOINT))[1]
    h0 = next(vlm.residuals(model, tok, np.stack([S.render(s)[0] for s in specs[:32]]), ALT_HOOKPOINT))[1]
    sl = vlm.image_slice(model)
    norms = {
        SAE_HOOKPOINT: {
            "image": round(float(h[:, sl].norm(dim=-1).mean()), 3),
            "bos": round(float(h[:, 0].norm(dim=-1).mean()), 3),
            "prompt_word": round(float(h[:, -1].norm(dim=-1).mean()), 3),
        },
        ALT_HOOKPOINT: {
            "image": round(float(h0[:, sl].norm(dim=-1).mean()), 3),
            "bos": round(float(h0[:, 0].norm(dim=-1).mean()), 3),
            "prompt_word": round(float(h0[:, -1].norm(dim=-1).mean()), 3),
        },
    }
    labels = {str(f): e.to_dict() for f, e in expl.items()}
    steering = {
        "hookpoint": SAE_HOOKPOINT,
        "value_multiple": best["multiple"],
        "colour_features": colour_features,
        "default_positions": best["positions"],
        "suppress_other_colours": best["suppress_other_colours"],
        "suppress_for": suppress_for,
        "best": best_key,
        "sweep": sweep,
        "residual_norms": norms,
        "calibrated": calibrated,
        "placement": placement,
        "test_protocol": test_protocol,
        "calibration_sweep": {
            k: {"min_success": v["min_success"], "per_colour": {c: r["success"] for c, r in v["per_colour"].items()}}
            for k, v in calib_sweep.items()
        },
        "comparison": {"hookpoint": ALT_HOOKPOINT, "sae_eval": alt_ev, "colour_iou": alt_loc, "sweep": alt_sweep},
    }
    summary = {
        "sae_eval": ev,
        "localisation": loc,
        "random_baseline": baseline,
        "steering": steering,
        "train_history": hist,
        "seed_selection": candidates,
    }
    (out_dir / "labels.json").write_text(json.dumps(labels))
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    (out_dir / "index_scenes.json").write_text(json.dumps({"scenes": specs}))
    (out_dir / "organism.json").write_text(
        json.dumps({"captioner": "llava-scenes", "hookpoint": SAE_HOOKPOINT, "layout": "sparsify"})
    )
    colour_iou = {c: loc[c]["iou"] for c in S.COLOURS}
    shape_iou = {c: loc[c]["iou"] for c in S.SHAPES}
    metrics = {
        "heldout_fvu": round(ev["fvu"], 4),
        "dead_fraction": round(ev["dead_fraction"], 4),
        "l0": ev["l0"],
        "min_colour_iou": min(colour_iou.values()),
        "min_shape_iou": min(shape_iou.values()),
        "colour_iou": colour_iou,
        "shape_iou": shape_iou,
        "top50_top5_iou": baseline["top5_iou"],
        "top50_random_iou": baseline["random_iou"],
        "iou_ratio_vs_random": baseline["ratio"],
        "steer_best": best_key,
        "steer_min_success_best": best["min_success"],
        "steer_success_best": {c: v["success"] for c, v in best["per_colour"].items()},
        "steer_min_success_by_config": {k: v["min_success"] for k, v in sweep.items()},
        "steer_calibrated_multiples": cal["multiples"],
        "steer_success_calibrated": {c: v["success"] for c, v in cal_res.items()},
        "steer_placement_min_success": {
            k: min(v["success"] for v in r.values()) for k, r in placement["clamp"].items()
        },
        "alt_site_min_success": {k: v["min_success"] for k, v in alt_sweep.items()},
        "residual_norms": norms,
        "sae_train_s": round(t_sae, 1),
        "index_build_s": round(t_index, 1),
    }
    return {"steps": steps, "metrics": metrics, "hookpoint": SAE_HOOKPOINT, "n_latents": SAE_LATENTS, "k": SAE_K}
