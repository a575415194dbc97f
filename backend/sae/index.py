"""The feature index: one streaming pass over a scene set, bounded memory, stored as safetensors.

Per feature it keeps the top-K images (ranked by the feature's mean activation over the image-patch
tokens, as in the paper) with their per-patch activation maps, the firing density over image tokens,
max / mean non-zero activation, and a histogram of non-zero activations (fixed log-spaced bins, so
no second pass is needed). The state is F × K × P maps plus F × bins counts: it does not grow with
the number of images streamed (`state_bytes()` is constant after construction).

The index of a zoo organism is over its scene set (image ids = scene numbers); the index of a hub
VLM is over an image folder or dataset (`ImageSource`, recorded in the file's metadata; image ids =
positions in the source). This module knows nothing of organisms (backend.sae.loading loads them);
the command line is `python -m backend.sae.cli` (one process) and `backend.precompute.sae_index`
(sharded, resumable).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from .sae import SparseAutoencoder

INDEX_FILE = "feature_index.safetensors"
INDEX_ENV = "WORKBENCH_SAE_INDEX"  # a feature index file (or a folder holding one) the Features tab loads
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif")
HIST_EDGES = torch.logspace(-2, 2, 41)  # 0.01 … 100, 40 log bins; outside values clamp to the ends


def ranked(
    scores: torch.Tensor, ids: torch.Tensor, maps: torch.Tensor, top_k: int, chunk: int = 8192
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each feature's entries [F, m] (maps [F, m, P]) ordered by score (descending), then by image id
    (ascending; empty slots, id -1, last), cut to `top_k`: one order whatever the slots or the split.
    Written chunk by chunk into the result, so the maps (gigabytes at 131k features) exist twice at
    most, never three times."""
    F, m, P = maps.shape
    k = min(top_k, m)
    out = (scores.new_empty(F, k), ids.new_empty(F, k), maps.new_empty(F, k, P))
    flat_maps = maps.reshape(-1, P)
    for f in range(0, F, chunk):
        s, i = scores[f : f + chunk], ids[f : f + chunk]
        order = torch.argsort(torch.where(i >= 0, i, torch.iinfo(torch.long).max), dim=1, stable=True)
        order = order.gather(1, torch.argsort(s.gather(1, order), dim=1, descending=True, stable=True))[:, :k]
        torch.gather(s, 1, order, out=out[0][f : f + chunk])
        torch.gather(i, 1, order, out=out[1][f : f + chunk])
        # whole maps move as rows (a gather over an expanded index moves one patch at a time, 6× slower)
        rows = (torch.arange(f, f + len(s), device=s.device)[:, None] * m + order).reshape(-1)
        torch.index_select(flat_maps, 0, rows, out=out[2][f : f + chunk].view(-1, P))
    return out


class IndexBuilder:
    def __init__(
        self,
        n_features: int,
        n_patches: int,
        top_k: int = 16,
        *,
        map_dtype=torch.float16,
        device: torch.device | str | None = None,
    ):
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
        return sum(
            t.numel() * t.element_size()
            for t in (
                self.top_scores,
                self.top_ids,
                self.top_maps,
                self.fire_count,
                self.act_sum,
                self.max_act,
                self.hist,
            )
        )

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
        # statistics over tokens, from every code entry: an entry that does not fire adds 0 to the
        # counts and sums and 0 to a maximum of non-negative values, so the figures are those of the
        # firing entries alone, without selecting them first (a boolean selection waits for the
        # device: two per batch, and a bincount a third)
        fidx = idx.reshape(-1)
        fv = torch.where(live, vals, 0.0).reshape(-1)
        ones = live.reshape(-1).long()
        self.fire_count.index_add_(0, fidx, ones)
        self.act_sum.index_add_(0, fidx, fv.double())
        self.max_act.scatter_reduce_(0, fidx, fv, reduce="amax")
        b = torch.bucketize(fv.clamp(HIST_EDGES[0].item(), HIST_EDGES[-1].item() * 0.9999), self.edges) - 1
        self.hist.view(-1).index_add_(0, fidx * self.hist.shape[1] + b.clamp(0, self.hist.shape[1] - 1), ones)
        self.n_tokens += B * P
        self.n_images += B
        # image scores: mean activation over the patches, [B, F] built sparsely
        scores = torch.zeros(B, self.F, device=dev)
        scores.scatter_add_(1, idx.reshape(B, -1), (vals * live).reshape(B, -1))
        scores /= P
        # only a batch's own top-K per feature can enter the index: candidates ≤ F × K pairs
        cs, cb = scores.T.topk(min(self.K, B), dim=1)  # [F, kb], best first
        rows = ((cs[:, 0] > 0) & (cs[:, 0] > self.top_scores.amin(1))).nonzero().squeeze(1)
        if not len(rows):
            return
        # The slots are unordered (`tensors()` ranks them): a new image takes the slot of the worst
        # entry it beats, so only its own map is written, never a feature's other K - 1 (rewriting
        # them cost more than the SAE's encoder at 131k features). The j-th best candidate enters
        # when it beats the j-th worst entry (strictly: on a tie the image streamed first stays).
        worst, slot = self.top_scores[rows].sort(dim=1, stable=True)  # empty slots (-inf) first
        kb = cs.shape[1]
        c = cs[rows]
        # the entering pairs' positions, found once (four boolean selections would wait four times)
        er, ej = ((c > 0) & (c > worst[:, :kb])).nonzero(as_tuple=True)
        fs = rows[er]
        ss, bs = slot[er, ej], cb[rows[er], ej]
        self.top_scores[fs, ss] = c[er, ej]
        self.top_ids[fs, ss] = image_ids[bs]
        self._write_maps(vals, idx, fs, ss, bs)

    def _write_maps(
        self, vals: torch.Tensor, idx: torch.Tensor, fs: torch.Tensor, ss: torch.Tensor, bs: torch.Tensor
    ) -> None:
        """The per-patch activation maps of feature fs[i] in batch image bs[i], written into its slot
        ss[i]: each code entry is routed to its (image, feature) pair, one pass over the B × P × k
        codes, straight into the state (no [pairs, P] map in between: at 131k features that copy
        cost as much as the rest of the update). A token's top-k names a feature once, so no
        entry of a map is written twice."""
        B, P, k = vals.shape
        self.top_maps.view(-1, P).index_fill_(0, fs * self.K + ss, 0)  # (index_put_ of a scalar: 3× slower)
        slot_of = torch.full((B, self.F), -1, dtype=torch.long, device=vals.device)
        slot_of[bs, fs] = ss
        e_slot = slot_of.gather(1, idx.reshape(B, -1)).reshape(B, P, k)
        hb, hp, hk = (e_slot >= 0).nonzero(as_tuple=True)  # once, for the four selections below
        at = (idx[hb, hp, hk] * self.K + e_slot[hb, hp, hk]) * P + hp
        self.top_maps.view(-1)[at] = vals[hb, hp, hk].to(self.top_maps.dtype)

    def tensors(self) -> dict[str, torch.Tensor]:
        """The index: each feature's top-K images ranked (best first, then by image id), and its statistics."""
        fires = self.fire_count.clamp(min=1)
        # ranked on the host: a second copy of the maps (gigabytes at 131k) never sits beside the SAE
        scores, ids, maps = ranked(self.top_scores.cpu(), self.top_ids.cpu(), self.top_maps.cpu(), self.K)
        out = {
            "top_scores": scores.clamp(min=0).nan_to_num(0.0),
            "top_ids": ids,
            "top_maps": maps,
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

    @property
    def source(self) -> "ImageSource | None":
        """The image folder / dataset a hub index was built over (None for a zoo scene index)."""
        return ImageSource.from_meta(self.meta)

    def top(self, feature: int, n: int = 5) -> tuple[list[int], torch.Tensor, list[float]]:
        """(image ids, maps [n, grid, grid], scores) of a feature's top-n images (valid ones only)."""
        if not 0 <= feature < self.n_features:
            raise IndexError(f"feature {feature} out of range 0..{self.n_features - 1}")
        ids = self.tensors["top_ids"][feature, :n]
        keep = ids >= 0
        maps = self.tensors["top_maps"][feature, :n][keep].float().reshape(-1, self.grid, self.grid)
        return ids[keep].tolist(), maps, self.tensors["top_scores"][feature, :n][keep].tolist()

    def save(self, path: Path) -> Path:
        save_file(
            {k: v.contiguous() for k, v in self.tensors.items()}, str(path), metadata={"meta": json.dumps(self.meta)}
        )
        return path

    @classmethod
    def load(cls, path: Path) -> "FeatureIndex":
        from safetensors import safe_open

        with safe_open(str(path), "pt") as f:
            meta = json.loads((f.metadata() or {}).get("meta", "{}"))
        return cls(load_file(str(path)), meta)


@torch.no_grad()
def build_index(
    model,
    tokenizer,
    sae: SparseAutoencoder,
    specs: list[dict],
    *,
    hookpoint: str,
    top_k: int = 16,
    batch_size: int = 64,
    progress=None,
    images: np.ndarray | None = None,
) -> FeatureIndex:
    """Stream the scene set through the VLM once; encode the image-patch residuals; keep the index."""
    from . import scenes as S
    from . import vlm

    sl = vlm.image_slice(model)
    n_p = vlm.n_image_tokens(model)
    builder = IndexBuilder(sae.n_latents, n_p, top_k, device=sae.W_enc.device)
    t0 = time.perf_counter()
    for i in range(0, len(specs), batch_size):
        chunk = specs[i : i + batch_size]
        imgs = images[i : i + batch_size] if images is not None else np.stack([S.render(s)[0] for s in chunk])
        for _, h in vlm.residuals(model, tokenizer, imgs, hookpoint, batch_size=batch_size):
            vals, idx = sae.encode_sparse(h[:, sl])
            builder.update(vals, idx, torch.arange(i, i + len(chunk)))
        if progress:
            progress(min(1.0, (i + len(chunk)) / len(specs)))
    grid = int(round(n_p**0.5))
    meta = {
        "grid": grid,
        "n_images": builder.n_images,
        "n_tokens": builder.n_tokens,
        "top_k": top_k,
        "hookpoint": hookpoint,
        "ranking": "mean activation over image-patch tokens",
        "density": "fraction of image-patch tokens where the feature is non-zero",
        "build_s": round(time.perf_counter() - t0, 2),
    }
    return FeatureIndex(builder.tensors(), meta)


class Cancelled(Exception):
    """An index build stopped on request; nothing is written."""


@torch.no_grad()
def build_streaming(
    encode,
    n_items: int,
    n_latents: int,
    n_patches: int,
    *,
    top_k: int = 16,
    batch_size: int = 8,
    device=None,
    progress=None,
    should_stop=None,
) -> IndexBuilder:
    """Feed `encode(start, end) -> (vals, idx) [B, P, k]` batch by batch into one IndexBuilder.
    `progress(done, total)` after each batch; `should_stop()` is checked before each batch and a
    true answer raises `Cancelled` (the shared model is not touched by this loop itself)."""
    builder = IndexBuilder(n_latents, n_patches, top_k, device=device)
    for start in range(0, n_items, batch_size):
        if should_stop is not None and should_stop():
            raise Cancelled(f"stopped after {start} of {n_items} images")
        end = min(start + batch_size, n_items)
        vals, idx = encode(start, end)
        builder.update(vals, idx, torch.arange(start, end))
        if progress is not None:
            progress(end, n_items)
    return builder


# ---------------------------------------------------------------------------------- image sources
@dataclass
class ImageSource:
    """The images an index was built over: a folder (files in sorted relative-path order) or a
    `datasets` split with an image column. Image id i of the index is item i of the source."""

    kind: str  # "folder" | "dataset"
    root: str  # the folder, or the dataset's name
    files: list[str] = field(default_factory=list)
    split: str = "train"
    column: str = "image"
    n: int | None = None  # a dataset's first n rows

    @classmethod
    def folder(cls, path, limit: int | None = None) -> "ImageSource":
        root = Path(path).resolve()
        if not root.is_dir():
            raise ValueError(f"{path} is not a folder")
        files = sorted(
            p.relative_to(root).as_posix()
            for p in root.rglob("*")
            if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
        )
        if limit:
            files = files[:limit]
        if not files:
            raise ValueError(f"{path} holds no images ({', '.join(IMAGE_SUFFIXES)})")
        return cls("folder", str(root), files)

    @classmethod
    def dataset(cls, name: str, split: str = "train", column: str = "image", limit: int | None = None) -> "ImageSource":
        src = cls("dataset", name, split=split, column=column)
        rows = len(src._rows())
        src.n = min(rows, limit) if limit else rows
        return src

    def _rows(self):
        try:
            import datasets
        except ImportError as e:
            raise ValueError("image datasets need the `datasets` package; index an image folder instead") from e
        ds = getattr(self, "_ds", None)
        if ds is None:
            ds = datasets.load_dataset(self.root, split=self.split)
            if self.column not in ds.column_names:
                raise ValueError(f"{self.root} has no column {self.column!r} (columns: {ds.column_names})")
            object.__setattr__(self, "_ds", ds)
        return ds

    def __len__(self) -> int:
        return len(self.files) if self.kind == "folder" else int(self.n or 0)

    def name(self, i: int) -> str:
        return self.files[i] if self.kind == "folder" else f"{self.root}[{self.split}][{i}]"

    def load(self, i: int) -> np.ndarray:
        """Image i as uint8 RGB [H, W, 3]."""
        from PIL import Image

        if not 0 <= i < len(self):
            raise IndexError(f"image {i} out of range 0..{len(self) - 1}")
        if self.kind == "folder":
            path = Path(self.root) / self.files[i]
            try:
                with Image.open(path) as im:
                    return np.asarray(im.convert("RGB"))
            except (OSError, ValueError) as e:
                raise ValueError(f"{self.files[i]} is not a readable image ({e})") from e
        return np.asarray(self._rows()[i][self.column].convert("RGB"))

    def describe(self) -> dict:
        if self.kind == "folder":
            return {"kind": "folder", "root": self.root, "files": self.files}
        return {"kind": "dataset", "root": self.root, "split": self.split, "column": self.column, "n": len(self)}

    def digest(self) -> str:
        """What an index's images are: names plus, for files, their sizes (an edited folder recomputes)."""
        h = hashlib.sha256(json.dumps({k: v for k, v in self.describe().items() if k != "files"}).encode())
        for f in self.files:
            h.update(f.encode())
            h.update(str(os.path.getsize(Path(self.root) / f)).encode())
        return h.hexdigest()[:16]

    @classmethod
    def from_meta(cls, meta: dict) -> "ImageSource | None":
        d = meta.get("source")
        if not isinstance(d, dict) or d.get("kind") not in ("folder", "dataset"):
            return None
        if d["kind"] == "folder":
            return cls("folder", d["root"], list(d.get("files", [])))
        return cls("dataset", d["root"], split=d.get("split", "train"), column=d.get("column", "image"), n=d.get("n"))


def find_index(*candidates) -> Path | None:
    """The first existing index among files or folders holding `INDEX_FILE`."""
    for c in candidates:
        if not c:
            continue
        p = Path(c)
        if p.is_dir():
            p = p / INDEX_FILE
        if p.is_file():
            return p
    return None
