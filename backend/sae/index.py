"""The feature index: one streaming pass over a scene set, bounded memory, stored as safetensors.

Per feature it keeps the top-K images (ranked by the feature's mean activation over the image-patch
tokens, as in the paper) with their per-patch activation maps, the firing density over image tokens,
max / mean non-zero activation, and a histogram of non-zero activations (fixed log-spaced bins, so
no second pass is needed). The state is F × K × P maps plus F × bins counts: it does not grow with
the number of images streamed (`state_bytes()` is constant after construction).

Rebuild from the command line:

    python -m backend.sae.index build [--organism llava-scenes-sae] [--out FILE] [--n-images N]
    python -m backend.sae.index show FEATURE [--organism llava-scenes-sae]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from .sae import TopKSAE

INDEX_FILE = "feature_index.safetensors"
HIST_EDGES = torch.logspace(-2, 2, 41)  # 0.01 … 100, 40 log bins; outside values clamp to the ends


class IndexBuilder:
    def __init__(self, n_features: int, n_patches: int, top_k: int = 16, *, map_dtype=torch.float16,
                 device: torch.device | str | None = None):
        # On a GPU the state sits beside the SAE: at 131k features it is gigabytes, and gathering it
        # on the host for every batch costs more than the LM's forward.
        self.F, self.P, self.K = n_features, n_patches, top_k
        self.device = torch.device(device or "cpu")
        with torch.device(self.device):
            self.top_scores = torch.full((n_features, top_k), -torch.inf)
            self.top_ids = torch.full((n_features, top_k), -1, dtype=torch.long)
            self.top_maps = torch.zeros((n_features, top_k, n_patches), dtype=map_dtype)
            self.fire_count = torch.zeros(n_features, dtype=torch.long)
            self.act_sum = torch.zeros(n_features, dtype=torch.float64)
            self.max_act = torch.zeros(n_features)
            self.hist = torch.zeros((n_features, len(HIST_EDGES) - 1), dtype=torch.long)
        self.edges = HIST_EDGES.to(self.device)
        self.n_tokens = 0
        self.n_images = 0

    def state_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (
            self.top_scores, self.top_ids, self.top_maps, self.fire_count, self.act_sum, self.max_act, self.hist))

    @staticmethod
    def bound_bytes(n_features: int, n_patches: int, top_k: int, map_bytes: int = 2) -> int:
        """What the state may hold: features × k × (patches + score + id) plus per-feature stats."""
        per_feature = top_k * (n_patches * map_bytes + 4 + 8) + 8 + 8 + 4 + 8 * (len(HIST_EDGES) - 1)
        return n_features * per_feature

    @torch.no_grad()
    def update(self, vals: torch.Tensor, idx: torch.Tensor, image_ids: torch.Tensor | None = None) -> None:
        """Add a batch of sparse codes at the image-patch tokens: vals/idx [B, P, k]."""
        B, P, k = vals.shape
        if P != self.P:
            raise ValueError(f"expected {self.P} patches, got {P}")
        dev = self.device
        if image_ids is None:
            image_ids = torch.arange(self.n_images, self.n_images + B)
        vals, idx, image_ids = vals.to(dev).float(), idx.to(dev), image_ids.to(dev)
        live = vals > 0
        # statistics over tokens
        fidx = idx[live]
        fv = vals[live]
        self.fire_count += torch.bincount(fidx, minlength=self.F)
        self.act_sum.index_add_(0, fidx, fv.double())
        self.max_act.scatter_reduce_(0, fidx, fv, reduce="amax")
        b = torch.bucketize(fv.clamp(HIST_EDGES[0].item(), HIST_EDGES[-1].item() * 0.9999), self.edges) - 1
        self.hist.view(-1).index_add_(0, fidx * self.hist.shape[1] + b.clamp(0, self.hist.shape[1] - 1),
                                      torch.ones_like(fidx))
        self.n_tokens += B * P
        self.n_images += B
        # image scores: mean activation over the patches, [B, F] built sparsely
        scores = torch.zeros(B, self.F, device=dev)
        scores.scatter_add_(1, idx.reshape(B, -1), (vals * live).reshape(B, -1))
        scores /= P
        # only a batch's own top-K per feature can enter the index: candidates ≤ F × K pairs
        kb = min(self.K, B)
        cs, cb = scores.T.topk(kb, dim=1)  # [F, kb]
        ok = (cs > 0) & (cs > self.top_scores[:, -1:])
        if not ok.any():
            return
        all_scores = torch.cat([self.top_scores, torch.where(ok, cs, -torch.inf)], 1)
        new_scores, sel = all_scores.topk(self.K, dim=1)  # sorted descending
        take = (sel >= self.K) & torch.isfinite(new_scores)
        # Only features that gained an image change their ids and maps; the others keep theirs
        # (their new scores equal the old ones, ties included), so the map state is not rewritten.
        rows = take.any(1).nonzero().squeeze(1)
        s, tk, vd = sel[rows], take[rows], torch.isfinite(new_scores[rows])
        old_sel = s.clamp(max=self.K - 1)
        new_b = cb[rows[:, None], (s - self.K).clamp(min=0)]  # batch row of a new entry
        maps = self.top_maps[rows[:, None], old_sel]
        maps[tk] = self._pair_maps(vals, idx, rows[:, None].expand_as(s)[tk], new_b[tk]).to(maps.dtype)
        maps[~vd] = 0
        ids = torch.where(tk, image_ids[new_b], self.top_ids[rows[:, None], old_sel])
        self.top_maps[rows] = maps
        self.top_ids[rows] = torch.where(vd, ids, -1)
        self.top_scores = new_scores

    def _pair_maps(self, vals: torch.Tensor, idx: torch.Tensor, fs: torch.Tensor, bs: torch.Tensor) -> torch.Tensor:
        """Per-patch activation maps [pairs, P] of feature fs[i] in batch image bs[i]: each code entry
        is routed to its (image, feature) pair, so the work is one pass over the B × P × k codes
        rather than a pairs × P × k comparison (gigabytes at 131k features)."""
        B, P, k = vals.shape
        pair_of = torch.full((B, self.F), -1, dtype=torch.long, device=vals.device)
        pair_of[bs, fs] = torch.arange(len(fs), device=vals.device)
        e_pair = pair_of.gather(1, idx.reshape(B, -1)).reshape(B, P, k)
        hit = e_pair >= 0
        patch = torch.arange(P, device=vals.device)[None, :, None].expand(B, P, k)
        out = torch.zeros(len(fs), P, device=vals.device)
        out.index_put_((e_pair[hit], patch[hit]), vals[hit], accumulate=True)
        return out

    def tensors(self) -> dict[str, torch.Tensor]:
        fires = self.fire_count.clamp(min=1)
        out = {
            "top_scores": self.top_scores.clamp(min=0).nan_to_num(0.0),
            "top_ids": self.top_ids,
            "top_maps": self.top_maps,
            "density": self.fire_count.double().div(max(self.n_tokens, 1)).float(),
            "fire_count": self.fire_count,
            "mean_act": (self.act_sum / fires).float(),
            "max_act": self.max_act,
            "hist": self.hist,
            "hist_edges": HIST_EDGES.clone(),
        }
        return {k: v.cpu() for k, v in out.items()}


@dataclass
class FeatureIndex:
    """A loaded index (no recomputation): tensors plus metadata."""
    tensors: dict[str, torch.Tensor]
    meta: dict

    @property
    def n_features(self) -> int:
        return int(self.tensors["density"].shape[0])

    @property
    def grid(self) -> int:
        return int(self.meta["grid"])

    def top(self, feature: int, n: int = 5) -> tuple[list[int], torch.Tensor, list[float]]:
        """(image ids, maps [n, grid, grid], scores) of a feature's top-n images (valid ones only)."""
        if not 0 <= feature < self.n_features:
            raise IndexError(f"feature {feature} out of range 0..{self.n_features - 1}")
        ids = self.tensors["top_ids"][feature, :n]
        keep = ids >= 0
        maps = self.tensors["top_maps"][feature, :n][keep].float().reshape(-1, self.grid, self.grid)
        return ids[keep].tolist(), maps, self.tensors["top_scores"][feature, :n][keep].tolist()

    def save(self, path: Path) -> Path:
        save_file({k: v.contiguous() for k, v in self.tensors.items()}, str(path),
                  metadata={"meta": json.dumps(self.meta)})
        return path

    @classmethod
    def load(cls, path: Path) -> "FeatureIndex":
        from safetensors import safe_open

        with safe_open(str(path), "pt") as f:
            meta = json.loads((f.metadata() or {}).get("meta", "{}"))
        return cls(load_file(str(path)), meta)


@torch.no_grad()
def build_index(model, tokenizer, sae: TopKSAE, specs: list[dict], *, hookpoint: str, top_k: int = 16,
                batch_size: int = 64, progress=None, images: np.ndarray | None = None) -> FeatureIndex:
    """Stream the scene set through the VLM once; encode the image-patch residuals; keep the index."""
    from . import scenes as S
    from . import vlm

    sl = vlm.image_slice(model)
    n_p = vlm.n_image_tokens(model)
    builder = IndexBuilder(sae.n_latents, n_p, top_k, device=sae.W_enc.device)
    t0 = time.perf_counter()
    for i in range(0, len(specs), batch_size):
        chunk = specs[i:i + batch_size]
        imgs = images[i:i + batch_size] if images is not None else np.stack([S.render(s)[0] for s in chunk])
        for _, h in vlm.residuals(model, tokenizer, imgs, hookpoint, batch_size=batch_size):
            vals, idx = sae.encode_sparse(h[:, sl])
            builder.update(vals, idx, torch.arange(i, i + len(chunk)))
        if progress:
            progress(min(1.0, (i + len(chunk)) / len(specs)))
    grid = int(round(n_p ** 0.5))
    meta = {"grid": grid, "n_images": builder.n_images, "n_tokens": builder.n_tokens, "top_k": top_k,
            "hookpoint": hookpoint, "ranking": "mean activation over image-patch tokens",
            "density": "fraction of image-patch tokens where the feature is non-zero",
            "build_s": round(time.perf_counter() - t0, 2)}
    return FeatureIndex(builder.tensors(), meta)


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m backend.sae.index", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="rebuild the feature index of an SAE organism")
    b.add_argument("--organism", default="llava-scenes-sae")
    b.add_argument("--out", type=Path, default=None, help="file to write (default: a copy beside, "
                   "feature_index.rebuilt.safetensors, so the committed organism's checksums stay valid)")
    b.add_argument("--n-images", type=int, default=None, help="use the first N scenes of the index set")
    b.add_argument("--top-k", type=int, default=16)
    s = sub.add_parser("show", help="print one feature's page from the stored index")
    s.add_argument("feature", type=int)
    s.add_argument("--organism", default="llava-scenes-sae")
    s.add_argument("--file", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    from . import features as feats

    org = feats.load_organism(args.organism)
    if args.cmd == "build":
        specs = org.index_specs[: args.n_images] if args.n_images else org.index_specs
        idx = build_index(org.model, org.tokenizer, org.sae, specs, hookpoint=org.hookpoint, top_k=args.top_k)
        out = args.out or org.folder / "feature_index.rebuilt.safetensors"
        idx.save(out)
        print(json.dumps({"written": str(out), **idx.meta}, indent=2))
        return 0
    index = FeatureIndex.load(args.file) if args.file else org.index
    ids, _, scores = index.top(args.feature, 5)
    t = index.tensors
    print(json.dumps({"feature": args.feature, "density": float(t["density"][args.feature]),
                      "max_act": float(t["max_act"][args.feature]), "top_images": ids,
                      "top_scores": [round(s, 4) for s in scores],
                      "label": org.labels.get(str(args.feature), {})}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
