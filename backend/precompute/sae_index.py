"""The SAE feature index (backend.sae.index) over a whole image set, sharded across processes and
merged exactly: the zoo organism's scene set, or a hub VLM + SAE over an image folder or dataset.

    torchrun --nproc_per_node 2 -m backend.precompute.sae_index --out DIR --cpu [--images 2048]
    accelerate launch --num_processes 8 -m backend.precompute.sae_index --out DIR
    accelerate launch --num_processes 8 -m backend.precompute.sae_index --source hub \
        --image-folder IMAGES --out DIR [--model ID --sae ID --hookpoint model.layers.24]
    (or --dataset NAME --split train --image-column image, with the `datasets` package)

With --source hub the index is over the base image's patches of LLaVA-NeXT (see
backend.sae.hub_index), each image's forward pass stopped at the hookpoint; a chunk (--chunk images)
runs in batches of --batch images. Point the app at the result with
WORKBENCH_SAE_INDEX=DIR/feature_index.safetensors (the tab also finds it beside the SAE, or where
its own build writes).

Each chunk of images (fixed boundaries, `--chunk` images, one forward batch) is indexed on its own:
per feature its top-k images with their per-patch maps, and the raw statistics (firing count, sum of
activations in float64, max, histogram counts, token and image counts). The merge folds the chunks
in chunk order: counts and histograms add up (integers: exact), maxima take the max (exact), the
top-k lists merge by score with ties broken by the smaller image id. The merged state goes through
`IndexBuilder.tensors()`, so DIR/feature_index.safetensors has exactly the format (tensors and
metadata) that `FeatureIndex.load` and the Features tab read; copy it beside the SAE (or point the
organism's folder at it) to use it.

Resume: parts are written atomically under DIR/parts and a rerun skips the valid ones.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch

from ..core.precompute import ShardedJob, Tensors, job_parser, job_state
from ..sae.index import INDEX_FILE, FeatureIndex, IndexBuilder, ranked

STATE_FILE = "sae-index-state.safetensors"
SUM_KEYS = ("fire_count", "act_sum", "hist", "n_tokens", "n_images")


def _state(b: IndexBuilder) -> Tensors:
    return {
        "top_scores": b.top_scores,
        "top_ids": b.top_ids,
        "top_maps": b.top_maps,
        "fire_count": b.fire_count,
        "act_sum": b.act_sum,
        "max_act": b.max_act,
        "hist": b.hist,
        "n_tokens": torch.tensor([b.n_tokens]),
        "n_images": torch.tensor([b.n_images]),
    }


def merge_states(parts: list[Tensors], top_k: int) -> Tensors:
    """Chunk states → one state. Exact: integer sums, max, and a top-k whose order is by score
    (descending), then by image id (ascending), whatever the split."""
    out: Tensors = {}
    for k in SUM_KEYS:  # folded in chunk order (act_sum is float64)
        acc = parts[0][k].clone()
        for p in parts[1:]:
            acc += p[k]
        out[k] = acc
    out["max_act"] = torch.stack([p["max_act"] for p in parts]).amax(0)
    scores, ids, maps = (torch.cat([p[k] for p in parts], 1) for k in ("top_scores", "top_ids", "top_maps"))
    out["top_scores"], out["top_ids"], out["top_maps"] = ranked(scores, ids, maps, top_k)
    return out


def to_index(state: Tensors, meta: dict) -> FeatureIndex:
    """The merged state as the FeatureIndex the app loads (the builder's own `tensors()`)."""
    F, K, P = state["top_maps"].shape
    b = IndexBuilder(F, P, K, map_dtype=state["top_maps"].dtype)
    b.top_scores, b.top_ids, b.top_maps = state["top_scores"], state["top_ids"], state["top_maps"]
    b.fire_count, b.act_sum, b.max_act, b.hist = (
        state["fire_count"],
        state["act_sum"],
        state["max_act"],
        state["hist"],
    )
    b.n_tokens, b.n_images = int(state["n_tokens"][0]), int(state["n_images"][0])
    return FeatureIndex(b.tensors(), {**meta, "n_images": b.n_images, "n_tokens": b.n_tokens})


def signature(org, specs: list[dict], top_k: int, chunk: int) -> str:
    h = hashlib.sha256(json.dumps(specs, sort_keys=True).encode())
    h.update(json.dumps([org.name, org.hookpoint, org.sae.n_latents, top_k, chunk]).encode())
    return h.hexdigest()[:16]


def run(
    org,
    out: Path,
    *,
    n_images: int | None = None,
    top_k: int = 16,
    chunk: int = 64,
    state=None,
    stop_after: int | None = None,
) -> FeatureIndex | None:
    """Index `org.index_specs[:n_images]` with `org.sae` at `org.hookpoint`; returns the index on
    the main process (also written to out/feature_index.safetensors), None on the others."""
    from ..sae import scenes as S
    from ..sae import vlm

    specs = org.index_specs[:n_images] if n_images else org.index_specs
    if not specs:
        raise ValueError("this organism has no scene set to index")
    sl, n_p = vlm.image_slice(org.model), vlm.n_image_tokens(org.model)

    @torch.no_grad()
    def compute(start: int, end: int) -> Tensors:
        imgs = np.stack([S.render(s)[0] for s in specs[start:end]])
        b = IndexBuilder(org.sae.n_latents, n_p, top_k)
        for _, h in vlm.residuals(org.model, org.tokenizer, imgs, org.hookpoint, batch_size=end - start):
            vals, idx = org.sae.encode_sparse(h[:, sl])
            b.update(vals.cpu(), idx.cpu(), torch.arange(start, end))  # the index state lives in host memory
        return _state(b)

    t0 = time.perf_counter()
    job = ShardedJob(
        "sae-index",
        Path(out),
        len(specs),
        chunk,
        compute,
        lambda p: merge_states(p, top_k),
        signature=signature(org, specs, top_k, chunk),
    )
    merged = job.run(state, final_name=STATE_FILE, stop_after=stop_after)
    if merged is None:
        return None
    meta = {
        "grid": int(round(n_p**0.5)),
        "top_k": top_k,
        "hookpoint": org.hookpoint,
        "ranking": "mean activation over image-patch tokens",
        "density": "fraction of image-patch tokens where the feature is non-zero",
        "build_s": round(time.perf_counter() - t0, 2),
        "scene_file": "index_scenes.json",
        "precompute": {
            "chunk": chunk,
            "chunks": -(-len(specs) // chunk),
            "processes": int(getattr(state, "num_processes", 1)),
        },
    }
    return _save(to_index(merged, meta), Path(out))


def _save(index: FeatureIndex, out: Path) -> FeatureIndex:
    """Write the index beside the job's shards, whole or not at all (a reader never sees half)."""
    final = out / INDEX_FILE
    tmp = final.with_suffix(".tmp")
    index.save(tmp)
    tmp.replace(final)
    return index


def hub_signature(org, source, top_k: int, chunk: int, batch: int) -> str:
    h = hashlib.sha256(source.digest().encode())
    h.update(json.dumps([org.model_id, org.hookpoint, org.sae.n_latents, top_k, chunk, batch]).encode())
    return h.hexdigest()[:16]


def run_hub(
    org,
    source,
    out: Path,
    *,
    top_k: int = 16,
    chunk: int = 64,
    batch: int = 4,
    state=None,
    stop_after: int | None = None,
) -> FeatureIndex | None:
    """Index the images of `source` with a hub organism (backend.sae.loading.load_hub); the same
    file, format and metadata as the tab's own build (`features.index_images`)."""
    from ..sae import hub_index
    from ..sae.index import build_streaming

    if len(source) == 0:
        raise ValueError("no images to index")
    v = org.model.config.vision_config
    n_p = (v.image_size // v.patch_size) ** 2

    def compute(start: int, end: int) -> Tensors:
        b = build_streaming(
            lambda a, z: hub_index.encode_images(org, [source.load(start + i) for i in range(a, z)]),
            end - start,
            org.sae.n_latents,
            n_p,
            top_k=top_k,
            batch_size=batch,
        )
        # build_streaming numbers the images from 0: shift them to their place in the source
        b.top_ids = torch.where(b.top_ids >= 0, b.top_ids + start, b.top_ids)
        return _state(b)

    t0 = time.perf_counter()
    job = ShardedJob(
        "sae-index",
        Path(out),
        len(source),
        chunk,
        compute,
        lambda p: merge_states(p, top_k),
        signature=hub_signature(org, source, top_k, chunk, batch),
    )
    merged = job.run(state, final_name=STATE_FILE, stop_after=stop_after)
    if merged is None:
        return None
    meta = hub_index.index_meta(
        org,
        source,
        top_k,
        build_s=round(time.perf_counter() - t0, 2),
        precompute={
            "chunk": chunk,
            "batch": batch,
            "chunks": -(-len(source) // chunk),
            "processes": int(getattr(state, "num_processes", 1)),
        },
    )
    return _save(to_index(merged, meta), Path(out))


def main(argv: list[str] | None = None) -> None:
    ap = job_parser(__doc__, chunk=64, chunk_help="images per chunk (zoo: one forward batch)")
    ap.add_argument("--source", choices=("zoo", "hub"), default="zoo")
    ap.add_argument("--organism", default="llava-scenes-sae", help="zoo SAE organism (scene set + SAE)")
    ap.add_argument("--images", type=int, default=None, help="index the first N images (default: all)")
    ap.add_argument("--top-k", type=int, default=16)
    hub = ap.add_argument_group("hub (--source hub)")
    hub.add_argument("--model", default=None, help="hub id or allowed local folder of the VLM (default: the preset's)")
    hub.add_argument(
        "--sae", default=None, help="hub id or allowed local folder of the SAE repo (default: the preset's)"
    )
    hub.add_argument("--hookpoint", default=None, help="the SAE's hookpoint folder (default: model.layers.24)")
    hub.add_argument("--image-folder", type=Path, default=None, help="index the images of this folder (recursively)")
    hub.add_argument("--dataset", default=None, help="or a `datasets` image dataset (name or local path)")
    hub.add_argument("--split", default="train")
    hub.add_argument("--image-column", default="image")
    hub.add_argument("--batch", type=int, default=4, help="images per forward pass")
    args = ap.parse_args(argv)
    state = job_state(args)
    from ..sae import loading, organism

    if args.source == "hub":
        from ..sae.index import ImageSource

        if (args.image_folder is None) == (args.dataset is None):
            ap.error("--source hub needs exactly one of --image-folder or --dataset")
        source = (
            ImageSource.folder(args.image_folder, args.images)
            if args.image_folder is not None
            else ImageSource.dataset(args.dataset, args.split, args.image_column, args.images)
        )
        if args.cpu:
            import os

            os.environ["WORKBENCH_DEVICE"] = "cpu"  # the loaders place models by this
        org = loading.load_hub(
            args.model or organism.HUB_MODEL, args.sae or organism.HUB_SAE, args.hookpoint or organism.HUB_HOOKPOINT
        )
        index = run_hub(
            org,
            source,
            args.out,
            top_k=args.top_k,
            chunk=args.chunk,
            batch=args.batch,
            state=state,
            stop_after=args.stop_after,
        )
    else:
        org = loading.load_organism(args.organism)
        index = run(
            org,
            args.out,
            n_images=args.images,
            top_k=args.top_k,
            chunk=args.chunk,
            state=state,
            stop_after=args.stop_after,
        )
    if state.is_main_process and index is not None:
        print(json.dumps({"written": str(args.out / INDEX_FILE), **index.meta}))


if __name__ == "__main__":
    main()
