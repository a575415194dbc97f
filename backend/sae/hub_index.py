"""Building a hub organism's feature index in this process, for small image sets (the sharded,
resumable job for large ones: backend.precompute.sae_index), in the format that job writes.

Image positions on LLaVA-NeXT (anyres; see `vlm.ImageLayout`): the index uses the base image's
g × g patches (a fixed grid for every image; under causal attention their residuals do not depend on
the high-resolution tiles that follow). Newline tokens are never part of a patch map.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import torch

from ..core.interventions import locked
from ..core.zerogpu import capped, gpu
from . import vlm
from .analysis import positions_text
from .index import FeatureIndex, ImageSource, build_streaming
from .loading import need_model
from .organism import HUB_HOOKPOINT, Organism, install_index


def index_meta(org: Organism, source: ImageSource, top_k: int, **extra) -> dict:
    """The metadata of a hub index (the same from the tab and from the sharded job)."""
    model_id, sae_id = org.ids
    return {
        "grid": org.grid,
        "top_k": top_k,
        "hookpoint": org.hookpoint,
        "model": model_id,
        "sae": sae_id,
        "prompt": vlm.HUB_PROMPT,
        "ranking": "mean activation over the base image's patch tokens",
        "density": "fraction of base-image patch tokens where the feature is non-zero",
        "positions": positions_text(org),
        "source": source.describe(),
        **extra,
    }


def build_hub_index(
    org: Organism,
    source: ImageSource,
    *,
    top_k: int = 16,
    batch_size: int = 4,
    progress=None,
    should_stop=None,
    out: Path | None = None,
) -> FeatureIndex:
    """Index a (small) image set and use it from now on (see `index_images`)."""
    target = out or org.index_out
    assert target is not None  # a hub organism has its index_out
    path = Path(target)
    index = index_images(
        org, source, top_k=top_k, batch_size=batch_size, progress=progress, should_stop=should_stop, out=path
    )
    install_index(org, index, path)
    return index


def _index_seconds(org, source, *args, **kwargs) -> float:
    # the 8B model on the prompt prefix to layer 24, five crops through the vision tower and the
    # processor's resizing: well under half a second per image on a GPU
    return capped(10 + 0.5 * len(source))


@gpu(duration=_index_seconds)
def index_images(
    org: Organism,
    source: ImageSource,
    *,
    top_k: int = 16,
    batch_size: int = 4,
    progress=None,
    should_stop=None,
    out: Path | None = None,
) -> FeatureIndex:
    """Index a (small) image set in this process, batch by batch, written atomically to `out`
    (default `org.index_out`) in the format the sharded job writes. Under ZeroGPU this runs in a
    GPU worker: the server process picks the file up (`refresh_index`), so nothing here needs to
    reach it. `progress(done, total)`; `should_stop()` → `Cancelled`, nothing written."""
    import time

    if not org.is_hub:
        raise ValueError("the zoo organism's index is built by its recipe (python -m backend.sae.cli build)")
    if len(source) == 0:
        raise ValueError("no images to index")
    need_model(org)
    assert org.sae is not None  # need_model loaded it
    g = org.grid
    t0 = time.perf_counter()
    builder = build_streaming(
        lambda a, b: encode_images(org, [source.load(i) for i in range(a, b)]),
        len(source),
        org.n_features,
        g * g,
        top_k=top_k,
        batch_size=batch_size,
        device=org.sae.W_enc.device,
        progress=progress,
        should_stop=should_stop,
    )
    index = FeatureIndex(
        builder.tensors(),
        index_meta(
            org,
            source,
            top_k,
            n_images=builder.n_images,
            n_tokens=builder.n_tokens,
            build_s=round(time.perf_counter() - t0, 2),
        ),
    )
    target = out or org.index_out
    assert target is not None  # a hub organism has its index_out
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    index.save(tmp)
    tmp.replace(path)
    return index


def index_command(org: Organism, images: str = "IMAGE_FOLDER") -> str:
    """The command that builds this organism's index (sharded with accelerate; resumable). It is
    shown to visitors, so it names no server folder: OUT is wherever the owner keeps the file."""
    if not org.is_hub:
        return f"python -m backend.sae.cli build --organism {org.name.removeprefix('zoo:')}"
    model_id, sae_id = org.ids
    out = "OUT"
    return (
        f"accelerate launch -m backend.precompute.sae_index --source hub --model {shlex.quote(model_id)} "
        f"--sae {shlex.quote(sae_id)} --hookpoint {shlex.quote(org.summary.get('hub_hookpoint', HUB_HOOKPOINT))} "
        f"--image-folder {images} --out {shlex.quote(str(out))}"
    )


@torch.no_grad()
def encode_images(org: Organism, images) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse codes (vals, idx) [B, g*g, k] at the base image's patches of a hub VLM: what the index
    holds for each image. The language model runs only up to the base image's last patch and stops
    at the hookpoint (`vlm.hub_base_residuals`)."""
    need_model(org)
    with locked(org.model):
        rows, _ = vlm.hub_base_residuals(org.model, org.processor, list(images), org.hookpoint)
    assert org.sae is not None  # need_model loaded it
    return org.sae.encode_sparse(rows.float().to(org.sae.W_enc.device))
