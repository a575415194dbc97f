"""NeMo's neuron statistics (μ, σ of |to_v| activations per neuron) over a large set of ordinary
prompts, sharded across processes and merged exactly.

    torchrun --nproc_per_node 2 -m backend.precompute.nemo_stats --out DIR --cpu [--prompts FILE]
    accelerate launch --num_processes 8 -m backend.precompute.nemo_stats --out DIR --source hub --prompts FILE

Each chunk of prompts gives Σa and Σa² per neuron in float64 and its prompt count
(backend.nemo.stats); the chunks are summed in chunk order, so 1 process and N processes give the
same bits. The result, DIR/nemo-stats.safetensors, is what the Memorization tab uses instead of
computing the statistics at first use when the server runs with WORKBENCH_NEMO_STATS=that file.

--prompts: a text file with one prompt per line, a JSON list, or a CSV with a Caption column (the
paper's files) (default: the preset's ordinary prompts: the sd-memo statistics prompts, or for the hub
checkpoint the 10,000 COCO captions of assets/data/nemo). Resume: parts are written atomically under DIR/parts; a rerun skips them.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..core.precompute import ShardedJob, job_parser, job_state, merge_sum
from ..nemo import core
from ..nemo import data as ndata
from ..nemo import stats as nstats


def run(
    pipe,
    prompts: list[str],
    out: Path,
    *,
    chunk: int = 16,
    model_id: str = "",
    state=None,
    stop_after: int | None = None,
) -> dict[str, torch.Tensor] | None:
    """Statistics of `prompts` on `pipe`; the merged tensors on the main process (also written to
    out/nemo-stats.safetensors), None on the others."""
    layers = core.value_layers(pipe.unet)

    def compute(start: int, end: int):
        return nstats.partial_sums(core.activations(pipe, prompts[start:end], layers, batch=end - start))

    def merge(parts):
        return nstats.finish(merge_sum(parts))  # summed in chunk order: exact whatever the split

    sig = nstats.prompts_digest(prompts)[:16] + f"-{model_id}-{chunk}"
    job = ShardedJob("nemo-stats", Path(out), len(prompts), chunk, compute, merge, signature=sig)
    merged = job.run(state, final_name="nemo-stats.partial.safetensors", stop_after=stop_after)
    if merged is None:
        return None
    (Path(out) / "nemo-stats.partial.safetensors").unlink(missing_ok=True)  # rewritten with metadata:
    nstats.save_stats(merged, Path(out) / nstats.STATS_FILE, model_id=model_id, prompts=prompts)
    return merged


def main(argv: list[str] | None = None) -> None:
    ap = job_parser(__doc__, chunk=16, chunk_help="prompts per chunk (= one text-encoder batch)")
    ap.add_argument("--source", default=None, help="zoo | hub (default: the active preset source)")
    ap.add_argument(
        "--prompts", type=Path, default=None, help="one prompt per line, a JSON list, or a CSV with a Caption column"
    )
    ap.add_argument("--samples", type=int, default=None, help="use the first N prompts")
    args = ap.parse_args(argv)
    state = job_state(args)
    from ..nemo import service

    m = service.get(args.source)
    if not args.cpu and state.device.type != "cpu":
        m.pipe.to(state.device)
    prompts = ndata.read_stats_prompts(args.prompts) if args.prompts else m.stats_prompts
    prompts = prompts[: args.samples] if args.samples else prompts
    run(m.pipe, prompts, args.out, chunk=args.chunk, model_id=m.model_id, state=state, stop_after=args.stop_after)
    if state.is_main_process:
        print(
            json.dumps(
                {
                    "written": str(args.out / nstats.STATS_FILE),
                    "n_prompts": len(prompts),
                    "model_id": m.model_id,
                    "processes": state.num_processes,
                }
            )
        )


if __name__ == "__main__":
    main()
