"""A checkpoint's weight files, read from their headers and names only: which safetensors files a
load reads (one variant of each), how many parameters and bytes they hold (local files, or the hub's
metadata), and the refusal of pickle-only folders.

The lowest room of model loading: `presets` (loading), `prefetch` (reading shards ahead) and
`modelcheck` (checking a user's model) all build on it, and it imports none of them.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from .errors import ModelCheckError, PresetError

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
_VARIANTS = (".fp16", ".bf16", ".ema", ".non_ema", ".fp32")


def refuse_pickles(folder: Path) -> None:
    """A local folder must hold its weights as safetensors; a pickle-only checkpoint is refused."""
    if not folder.is_dir():
        return
    files = [p for p in folder.rglob("*") if p.is_file()]
    has_safe = any(p.suffix == ".safetensors" for p in files)
    pickles = [p.name for p in files if p.suffix in PICKLE_SUFFIXES]
    if pickles and not has_safe:
        raise PresetError(f"refusing pickle weights {sorted(pickles)[:3]}: only safetensors checkpoints are loaded")


def bytes_words(n: int) -> str:
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n} bytes"


def _header(path: Path) -> dict:
    """The JSON header of a safetensors file (8-byte length, then JSON): no tensor is read. A file
    shorter than its header says (a download or copy cut short) is refused here, before any load."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > 100 * 2**20:
            raise ModelCheckError(f"{path.name}: implausible safetensors header ({n} bytes)")
        header = json.loads(f.read(n))
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    ends = [
        int(info.get("data_offsets", (0, 0))[1])
        for k, info in header.items()
        if k != "__metadata__" and isinstance(info, dict)
    ]
    want, have = 8 + n + max(ends, default=0), path.stat().st_size
    if have < want:
        raise ModelCheckError(
            f"{path.name} is incomplete: {bytes_words(have)} of the {bytes_words(want)} its "
            "header announces (a download or copy cut short); copy it again"
        )
    return header


def _is_variant(name: str) -> bool:
    return any(v + "." in name or v + "-" in name for v in _VARIANTS)


def _without_variants(names: list[str]) -> list[str]:
    """Drop variant files (fp16, ema, also sharded) from a folder that has plain weights beside
    them: diffusers repos ship both, and only one set loads."""
    plain_dirs = {n.rpartition("/")[0] for n in names if not _is_variant(n.rpartition("/")[2])}
    return [n for n in names if not (_is_variant(n.rpartition("/")[2]) and n.rpartition("/")[0] in plain_dirs)]


def weight_files(folder: Path) -> list[Path]:
    files = {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*.safetensors"))}
    return [files[n] for n in _without_variants(list(files))]


def local_size(folder: Path) -> tuple[int, int]:
    """(parameters, bytes) from the safetensors headers of a folder."""
    params = nbytes = 0
    for path in weight_files(folder):
        try:
            header = _header(path)
        except ModelCheckError:
            raise
        except (OSError, struct.error, ValueError, TypeError) as e:
            raise ModelCheckError(f"{path.name} is not a readable safetensors file") from e
        for name, info in header.items():
            if name == "__metadata__" or not isinstance(info, dict):
                continue
            count = 1
            for d in info.get("shape", []):
                count *= int(d)
            params += count
            start, end = info.get("data_offsets", (0, 0))
            nbytes += int(end) - int(start)
    return params, nbytes


_HUB_SIZES: dict[tuple[str, str | None], tuple[int | None, int]] = {}  # answers the hub gave


def _hub_size(repo: str, revision: str | None) -> tuple[int | None, int | None]:
    """(parameters, bytes) from the hub's metadata; (None, None) if it cannot be reached."""
    if (repo, revision) not in _HUB_SIZES:
        got = _ask_hub_size(repo, revision)
        params, n_bytes = got
        if n_bytes is None:
            return got  # not remembered: the hub may be reachable next time
        _HUB_SIZES[(repo, revision)] = (params, n_bytes)
    return _HUB_SIZES[(repo, revision)]


def _ask_hub_size(repo: str, revision: str | None) -> tuple[int | None, int | None]:
    from huggingface_hub import HfApi, get_safetensors_metadata
    from huggingface_hub.errors import NotASafetensorsRepoError

    try:
        meta = get_safetensors_metadata(repo, revision=revision)
        nbytes = sum(
            t.data_offsets[1] - t.data_offsets[0] for f in meta.files_metadata.values() for t in f.tensors.values()
        )
        return sum(meta.parameter_count.values()), nbytes
    except NotASafetensorsRepoError:
        pass  # a pipeline keeps its weights in subfolders: sum the files instead
    except Exception:
        return None, None
    try:
        info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    except Exception:
        return None, None
    sizes = {s.rfilename: s.size or 0 for s in info.siblings or []}
    names = [n for n in sizes if n.endswith(".safetensors")]
    if not names:
        raise ModelCheckError(f"{repo!r} has no safetensors weights: only safetensors checkpoints are loaded")
    return None, sum(sizes[n] for n in _without_variants(names))


def hub_or_cached_size(repo: str, revision: str | None, folder: Path | None) -> tuple[int | None, int | None]:
    """(parameters, bytes) of a hub model from the hub's metadata; offline, from the files of its
    snapshot `folder` in the local cache where that holds them."""
    params, nbytes = _hub_size(repo, revision)
    if nbytes is None and folder is not None:  # offline: what the local cache holds
        refuse_pickles(folder)
        if any(folder.rglob("*.safetensors")):
            return local_size(folder)
    return params, nbytes
