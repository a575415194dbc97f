"""Dataset-wide precompute, sharded across processes / GPUs with accelerate, merged exactly, resumable.

The data is cut into fixed chunks whose boundaries do not depend on the number of processes. Each
process computes the chunks `rank, rank + world, ...` and writes each chunk's partial result to
`out_dir/parts/chunk-XXXXX.safetensors` atomically; a restarted job skips the chunks already on disk
(resume). When every process is done, the main process merges the parts *in chunk order* — so a sum
of float statistics or a top-k with a fixed tie-break is bit-identical whatever the process count —
and writes the final file in the format the app reads.

Launch on GPUs with `accelerate launch --num_processes N -m <job module> ...`; on CPUs with
`torchrun --nproc_per_node N -m <job module> ... --cpu` (accelerate's PartialState then uses gloo).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file, save_file

Tensors = dict[str, torch.Tensor]


def job_parser(doc: str | None, *, chunk: int, chunk_help: str | None = None) -> argparse.ArgumentParser:
    """The options every sharded job shares; the job adds its own data options."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--chunk", type=int, default=chunk, help=chunk_help)
    ap.add_argument("--cpu", action="store_true", help="run on CPUs (gloo) even if a GPU exists")
    ap.add_argument("--stop-after", type=int, default=None, help=argparse.SUPPRESS)  # resume tests
    return ap


def texts_digest(texts) -> str:
    """sha256 of a list of texts: what a job's parts were computed from (a changed input recomputes)."""
    return hashlib.sha256(json.dumps(list(texts)).encode()).hexdigest()


def read_texts(path: Path) -> list[str]:
    """A job's input texts: one per line, or a JSON list of strings (or of {"prompt", "answer"}
    items, read as the full text "prompt answer"). Blank entries are dropped."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        items = json.loads(text)
        if not isinstance(items, list):
            raise ValueError(f"{path}: expected a JSON list")
        out = []
        for it in items:
            if isinstance(it, dict) and isinstance(it.get("prompt"), str):
                it = f"{it['prompt']} {it.get('answer', '')}"
            if not isinstance(it, str):
                raise ValueError(f"{path}: expected strings or {{'prompt', 'answer'}} items, got {type(it).__name__}")
            out.append(it)
    else:
        out = text.splitlines()
    texts = [t.strip() for t in out if t.strip()]
    if len(texts) < 2:
        raise ValueError(f"{path}: at least two texts are needed")
    return texts


def job_state(args: argparse.Namespace):
    """accelerate's process state for a parsed job; on CPUs one thread per process, since the
    processes already share the cores."""
    from accelerate import PartialState

    state = PartialState(cpu=args.cpu)
    if args.cpu:
        torch.set_num_threads(1)
    return state


def chunks(n_items: int, chunk_size: int) -> list[tuple[int, int]]:
    if n_items < 0 or chunk_size <= 0:
        raise ValueError("n_items must be >= 0 and chunk_size > 0")
    return [(s, min(s + chunk_size, n_items)) for s in range(0, n_items, chunk_size)]


def merge_sum(parts: list[Tensors]) -> Tensors:
    """Element-wise sum of every tensor, folded in chunk order."""
    out: Tensors = {}
    for part in parts:
        for k, v in part.items():
            out[k] = v.clone() if k not in out else out[k] + v
    return out


def merge_topk(values: list[torch.Tensor], ids: list[torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k along the last dim over concatenated parts; ties broken by the smaller global id, so
    the result does not depend on how the data was split. values/ids: [..., m_i] each."""
    v = torch.cat(values, dim=-1)
    i = torch.cat(ids, dim=-1)
    # Sort by id first, then a stable sort by value: equal values keep ascending id order.
    order = torch.argsort(i, dim=-1, stable=True)
    v, i = v.gather(-1, order), i.gather(-1, order)
    order = torch.argsort(v, dim=-1, descending=True, stable=True)[..., :k]
    return v.gather(-1, order), i.gather(-1, order)


@dataclass
class ShardedJob:
    name: str
    out_dir: Path
    n_items: int
    chunk_size: int
    compute: Callable[[int, int], Tensors]  # (start, end) -> partial result of that chunk
    merge: Callable[[list[Tensors]], Tensors] = merge_sum
    signature: str = ""  # what else the parts depend on (settings, data hash): a mismatch recomputes

    def part_path(self, c: int) -> Path:
        return Path(self.out_dir) / "parts" / f"{self.name}-chunk-{c:05d}.safetensors"

    def part_ok(self, c: int) -> bool:
        """A finished chunk: the file opens and records this chunk's span. A part that is missing,
        truncated, or written for a different chunking is recomputed (and overwritten)."""
        path = self.part_path(c)
        if not path.exists():
            return False
        try:
            from safetensors import safe_open

            with safe_open(str(path), "pt") as f:
                meta = f.metadata() or {}
                keys = list(f.keys())
            start, end = chunks(self.n_items, self.chunk_size)[c]
            return (
                bool(keys)
                and meta.get("start") == str(start)
                and meta.get("end") == str(end)
                and meta.get("signature", "") == self.signature
            )
        except Exception:  # unreadable (a torn copy, a foreign file): compute it again
            return False

    def run(self, state=None, *, final_name: str | None = None, stop_after: int | None = None) -> Tensors | None:
        """Compute this process's missing chunks, then (main process) merge and write.

        Returns the merged result on the main process, None elsewhere. `stop_after`: leave (SystemExit)
        before computing more than that many chunks in this process, as a killed job would."""
        if state is None:
            from accelerate import PartialState

            state = PartialState(cpu=not torch.cuda.is_available())
        spans = chunks(self.n_items, self.chunk_size)
        (Path(self.out_dir) / "parts").mkdir(parents=True, exist_ok=True)
        done = 0
        for c in range(state.process_index, len(spans), state.num_processes):
            path = self.part_path(c)
            if self.part_ok(c):
                continue  # resumed: this chunk was finished by an earlier run
            if stop_after is not None and done >= stop_after:
                raise SystemExit(3)  # a simulated interruption (tests of resume)
            done += 1
            part = {k: v.detach().cpu().contiguous() for k, v in self.compute(*spans[c]).items()}
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            meta = {"start": str(spans[c][0]), "end": str(spans[c][1])}
            if self.signature:
                meta["signature"] = self.signature
            save_file(part, str(tmp), metadata=meta)
            tmp.replace(path)  # atomic: an interrupted write never looks finished
        state.wait_for_everyone()
        if not state.is_main_process:
            return None
        merged = self.merge([load_file(str(self.part_path(c))) for c in range(len(spans))])
        final = Path(self.out_dir) / (final_name or f"{self.name}.safetensors")
        tmp = final.with_suffix(".tmp")
        save_file(merged, str(tmp), metadata={"n_items": str(self.n_items), "chunks": str(len(spans))})
        tmp.replace(final)
        return merged
