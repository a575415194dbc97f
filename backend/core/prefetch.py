"""Read a checkpoint's weight files once, in order, just before `from_pretrained` maps them, so that
a first load reports "loading <model> (n of N shards)" as it goes.

`from_pretrained` maps safetensors files and reads the pages as it copies tensors, all inside one
call that reports nothing; on a cold disk those reads are most of a load (minutes for an 8B
checkpoint). Reading each file here moves that wait into a loop that can report, and leaves the
pages in the OS cache for the mapping that follows. It runs only when someone listens
(`store.reporting()`), so notebooks, the CLI and the benchmarks load exactly as before.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from . import store
from .weightfiles import weight_files

CHUNK = 16 * 2**20
REPORT_EVERY = 256 * 2**20  # inside a large shard, a report per this many bytes


def local_folder(location: str, revision: str | None = None) -> Path | None:
    """The folder `from_pretrained(location)` reads: the location itself, or a hub repo's snapshot
    in the local cache; None when the files are not on this machine yet (from_pretrained downloads
    them, and the load reports its start and end only)."""
    if Path(location).is_dir():
        return Path(location)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(location, revision=revision, local_files_only=True))
    except Exception:  # not cached, or not a repo id: nothing to read ahead
        return None


def shard_files(folder: Path, skip: Iterable[str] = ()) -> list[Path]:
    """The safetensors files a load of `folder` reads, in order: one variant of each, and none of a
    pipeline component the caller leaves out (`safety_checker=None`)."""
    skip = set(skip)
    return [p for p in weight_files(folder) if p.relative_to(folder).parts[0] not in skip]


def read_shards(location: str, *, revision: str | None = None, skip: Iterable[str] = ()) -> int:
    """Read every weight file of `location` through the OS cache, reporting shard n of N with the
    fraction of bytes read so far (up to 0.9: building the model follows). Returns the shard count."""
    folder = local_folder(location, revision)
    files = shard_files(folder, skip) if folder is not None else []
    sizes = [f.stat().st_size for f in files]
    total, done = max(1, sum(sizes)), 0
    buf = bytearray(CHUNK)
    for i, (path, _size) in enumerate(zip(files, sizes), 1):
        store.report_shards(i, len(files), 0.9 * done / total)
        next_report = done + REPORT_EVERY
        with open(path, "rb", buffering=0) as fh:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            while n := fh.readinto(buf):
                done += n
                if done >= next_report and done < total:
                    store.report_shards(i, len(files), 0.9 * done / total)
                    next_report = done + REPORT_EVERY
    return len(files)
