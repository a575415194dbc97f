"""The workbench beside the papers' official code: the same inputs on the same machine, the time
ratio (workbench / official) and the largest difference in the results.

    python -m benchmarks.vs_official --official DIR [--only nemo,lrp,pissa,mathneuro]

DIR holds the official repositories as checked out (not part of this project, never imported by
it): DIR/MambaLRP (FarnoushRJ/MambaLRP), DIR/localizing_memorization_in_diffusion_models
(ml-research), DIR/MathNeuro (bryanchrist/MathNeuro, GPL: run as a program, its code is neither read
nor copied here) and DIR/PiSSA (GraphPKU/PiSSA). Pure-Python packages the official code needs and
this project does not (einops, torchmetrics) are looked up in DIR/site, after the project's own.

Everything done to the official code is glue, named where it happens: the device (their CUDA-only
calls on a CPU), the resolution and layer layout of a model other than theirs, and the same seeds.
Times are medians of alternated runs, one thread per process unless --threads says otherwise.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import importlib.util
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import types
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NEMO_REPO = "localizing_memorization_in_diffusion_models"


# ------------------------------------------------------------------------------------ measuring
def alternate(work: Callable, official: Callable, repeats: int) -> tuple[float, float, object, object]:
    """Median seconds of each, run in turns so that a change of machine load hits both alike;
    returns the last results too."""
    tw, to = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ro = official()
        to.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        rw = work()
        tw.append(time.perf_counter() - t0)
    return statistics.median(tw), statistics.median(to), rw, ro


def row(method: str, case: str, work_s: float, off_s: float, diff: str, note: str = "") -> dict:
    return {"method": method, "case": case, "work_s": work_s, "off_s": off_s,
            "ratio": work_s / off_s, "diff": diff, "note": note}


@contextlib.contextmanager
def official_path(folder: Path):
    """Their repository first on sys.path (their modules are named `utils`, `hooks`, ...), and
    their relative file paths resolved from it; both undone afterwards."""
    saved_path, saved_mods, cwd = list(sys.path), set(sys.modules), os.getcwd()
    sys.path.insert(0, str(folder))
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(cwd)
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_mods:
            mod = sys.modules[name]
            if str(getattr(mod, "__file__", "") or "").startswith(str(folder)):
                del sys.modules[name]


@contextlib.contextmanager
def cuda_calls_on_cpu():
    """Glue (device): their `tensor.cuda()` calls stay where the tensor is when no GPU is lent."""
    if torch.cuda.is_available():
        yield
        return
    saved = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *a, **k: self
    try:
        yield
    finally:
        torch.Tensor.cuda = saved


# ------------------------------------------------------------------------------------ NeMo
class SlotUNet:
    """Glue (layer layout): the official code addresses SD-1.x's seven value layers as
    down_blocks[0..2].attentions[0..1] and mid_block.attentions[0]. This view of any UNet puts its
    own down/mid value layers in those slots; a slot the model lacks holds a zero-width value layer
    (no neurons, so nothing is selected or blocked there) run on the text states beside the UNet so
    that the official activation hooks see an output."""

    SLOTS = [(b, a) for b in range(3) for a in range(2)] + [("mid", 0)]

    def __init__(self, unet):
        from backend import nemo

        self.unet, self.config, self.device = unet, unet.config, unet.device
        by_slot = {}
        for name in nemo.value_layers(unet):
            p = name.split(".")
            by_slot[("mid", 0) if p[0] == "mid_block" else (int(p[1]), int(p[3]))] = name
        self.names = [by_slot.get(s) for s in self.SLOTS]
        dim = unet.config.cross_attention_dim
        self.fillers = []

        def holder(name):
            if name is None:
                self.fillers.append(torch.nn.Linear(dim, 0))
                to_v = self.fillers[-1]
            else:
                to_v = unet.get_submodule(name)
            return types.SimpleNamespace(transformer_blocks=[types.SimpleNamespace(attn2=types.SimpleNamespace(to_v=to_v))])

        blocks = [types.SimpleNamespace(attentions=[holder(self.names[2 * b + a]) for a in range(2)])
                  for b in range(3)]
        self.down_blocks, self.mid_block = blocks, types.SimpleNamespace(attentions=[holder(self.names[6])])

    def to(self, *a, **k):  # glue (device): the model is already where it runs
        return self

    def __call__(self, *args, **kw):
        for f in self.fillers:
            f(kw["encoder_hidden_states"])
        return self.unet(*args, **kw)

    def stats_lists(self, stats):
        """The workbench's μ, σ in the official file's layout (one tensor per slot)."""
        return ([stats.mean[n] if n else torch.zeros(0) for n in self.names],
                [stats.std[n] if n else torch.zeros(0) for n in self.names])

    def spec(self, lists) -> dict[str, list[int]]:
        return {n: list(v) for n, v in zip(self.names, lists) if n and v}


class Movable:
    """Glue (device): a model whose `.to("cuda")` is a no-op on a machine without a GPU."""

    def __init__(self, module):
        self.module, self.device = module, module.device

    def to(self, *a, **k):
        return self

    def __call__(self, *a, **k):
        return self.module(*a, **k)


@contextlib.contextmanager
def workbench_seeds(drawn: torch.Tensor):
    """Glue (seeds): the official code draws x_T for its N samples from one generator seeded once;
    here sample i gets the workbench's x_T of seed i (`drawn`: nemo.initial_latents), so both
    sides start from the same noise."""
    saved = torch.randn

    def randn(*shape, generator=None, **kw):
        if generator is not None and len(shape) == 1 and len(shape[0]) == 4:
            return drawn[:shape[0][0]].clone()
        return saved(*shape, generator=generator, **kw)

    torch.randn = randn
    try:
        yield
    finally:
        torch.randn = saved


def ssim_for_small_latents(module):
    """Glue (resolution): MS-SSIM with an 11-pixel window over 3 scales needs latents wider than
    40; on smaller ones (the zoo's 8×8) the official module gets the workbench's single-scale SSIM
    (Gaussian window of 7, σ 1.5, valid positions), per pair of images as theirs is. torchmetrics'
    single-scale SSIM cannot stand in: it sizes its Gaussian window from σ (11 for σ 1.5)."""
    from backend.nemo.metrics import ssim

    full = module.multiscale_structural_similarity_index_measure

    def measure(a, b, reduction="none", kernel_size=11, betas=(0.33, 0.33, 0.33)):
        if min(a.shape[-2:]) > (kernel_size - 1) * 2 ** (len(betas) - 1):
            return full(a, b, reduction=reduction, kernel_size=kernel_size, betas=betas)
        return ssim(a.float().cpu(), b.float().cpu())

    return measure


class OfficialNemo:
    """The official NeMo functions and detection script, loaded once from their folder, around
    one pipeline."""

    def __init__(self, folder: Path, pipe, stats):
        from backend import nemo

        self.pipe, self.drawn = pipe, nemo.initial_latents(pipe, range(16))
        self.unet = SlotUNet(pipe.unet)
        self.tmp = Path(tempfile.mkdtemp(prefix="nemo-official-"))
        self.stats_file = self.tmp / "stats.pt"
        torch.save(self.unet.stats_lists(stats), self.stats_file)
        sys.modules.setdefault("rtpt", types.SimpleNamespace(  # glue: a progress-title helper
            RTPT=lambda *a, **k: types.SimpleNamespace(start=lambda: None, step=lambda: None)))
        with official_path(folder):
            import utils.activation_detection as ad

            spec = importlib.util.spec_from_file_location("nemo_detect", folder / "3_detect_memorized_neurons.py")
            script = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(script)
        measure = ssim_for_small_latents(ad)
        ad.multiscale_structural_similarity_index_measure = measure
        script.multiscale_structural_similarity_index_measure = measure
        script.load_sd_components = lambda version: (Movable(pipe.vae), self.unet, self._scheduler())
        script.load_text_components = lambda version: (pipe.tokenizer, Movable(pipe.text_encoder))
        self.ad, self.script = ad, script

    def _scheduler(self):
        from diffusers import DDIMScheduler

        return DDIMScheduler.from_config(self.pipe.scheduler.config)

    @contextlib.contextmanager
    def loaded(self):
        with cuda_calls_on_cpu(), workbench_seeds(self.drawn):
            yield self.ad, self.script

    def score(self, prompt: str, seeds: int):
        """Normalised noise differences and the max pairwise SSIM, at guidance 0."""
        with self.loaded() as (ad, _):
            d = ad.compute_noise_diff([prompt], self.pipe.tokenizer, self.pipe.text_encoder, self.unet,
                                      self._scheduler(), blocked_indices=None, guidance_scale=0, seed=1,
                                      samples_per_prompt=seeds, scaling_factor=0.0)
            return d.float().cpu(), float(ad.calculate_max_pairwise_ssim(d).max())

    def localize(self, prompt: str, theta_mem: float, seeds: int, dedup: bool = False) -> tuple[dict, dict]:
        """The detection script on one prompt with its defaults (θ from 5 by 0.25, k from 0,
        guidance 0) but the model's θ_mem and seed count → (initial, refined) as specs.

        `dedup`: their initial lists hold a neuron twice when both criteria pick it; the refinement
        then removes one copy (a test that changes nothing) and really tests it only at the second.
        With dedup the lists keep each neuron once, at its first occurrence, as the workbench's do
        (not glue: the one change to their algorithm, made to compare like with like)."""
        data, out = self.tmp / "prompt.csv", self.tmp / "result.csv"
        with data.open("w", newline="") as f:
            csv.writer(f, delimiter=";").writerows([["Caption", "URL"], [prompt, ""]])
        args = argparse.Namespace(
            version=str(self.stats_file), dataset=str(data), output=str(out), seed=1,
            samples_per_prompt=seeds, num_inference_steps=50, scaling_factor=0.0,
            pairwise_ssim_threshold=theta_mem, ssim_threshold_initial_selection=theta_mem,
            ssim_threshold_refinement=theta_mem, rel_threshold_refinement=None, guidance_scale=0.0,
            theta_reduction_per_step=0.25, min_theta=1.0, no_theta=False, initial_theta=5.0,
            no_top_k=False, initial_k=0, name="XX", continue_run=False)
        select = self.script.initial_neuron_selection
        if dedup:
            self.script.initial_neuron_selection = lambda *a, **k: [list(dict.fromkeys(v)) for v in select(*a, **k)]
        try:
            with self.loaded() as (_, script), contextlib.redirect_stdout(open(os.devnull, "w")):
                script.compute_memorization_statistics(args)
        finally:
            self.script.initial_neuron_selection = select
        with out.open() as f:
            res = next(csv.DictReader(f, delimiter=";"))
        return (self.unet.spec(ast.literal_eval(res["Initial Neurons"])),
                self.unet.spec(ast.literal_eval(res["Refined Neurons"])))


def labels(spec) -> str:
    from backend import nemo

    return " ".join(f"{nemo.short_name(n)}:{c}" for n, c in sorted(as_set(spec))) or "-"


def as_set(spec) -> set:
    return {(n, int(c)) for n, cs in spec.items() for c in cs}


def bench_nemo_zoo(folder: Path, repeats: int, n_prompts: int | None) -> list[dict]:
    from backend import nemo
    from backend.nemo import service

    m = service.get("zoo")
    stats = m.stats()
    off = OfficialNemo(folder, m.pipe, stats)
    prompts = [x["prompt"] for x in m.memorized][:n_prompts]
    seeds = m.num_seeds

    def work_score(p):
        d = nemo.noise_differences(m.pipe, p, range(seeds), guidance_scale=0.0)
        return d, float(nemo.pairwise_ssim(d).max())

    dd, ds, tw, to = 0.0, 0.0, [], []
    for p in prompts:
        w, o, (dw, sw), (do, so) = alternate(lambda: work_score(p), lambda: off.score(p, seeds), repeats)
        tw.append(w)
        to.append(o)
        dd, ds = max(dd, float((dw - do).abs().max())), max(ds, abs(sw - so))
    rows = [row("NeMo", f"noise difference + score, zoo sd-memo ({seeds} seeds, {len(prompts)} prompts)",
                statistics.median(tw), statistics.median(to),
                f"noise diff {dd:.1e}, score {ds:.1e}")]
    equal, equal_raw, wt, ot, lines = 0, 0, [], [], []
    for i, p in enumerate(prompts):
        t0 = time.perf_counter()
        init_o, ref_o = off.localize(p, m.theta_mem, seeds)
        ot.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        loc = nemo.localize(m.pipe, p, stats, m.theta_mem, num_seeds=seeds, guidance_scale=0.0)
        wt.append(time.perf_counter() - t0)
        _, ref_d = off.localize(p, m.theta_mem, seeds, dedup=True)
        same, same_raw = as_set(loc.neurons) == as_set(ref_d), as_set(loc.neurons) == as_set(ref_o)
        equal, equal_raw = equal + same, equal_raw + same_raw
        inter = len(as_set(loc.initial) & as_set(init_o)) / max(1, len(as_set(loc.initial) | as_set(init_o)))
        dup = sum(len(v) - len(set(v)) for v in init_o.values())
        state = "skipped" if loc.skipped else "relaxed" if loc.relaxed else "found"
        lines.append(f"  prompt {i} ({state}, {wt[-1]:.2f} s vs {ot[-1]:.2f} s): initial J {inter:.2f}, "
                     f"official duplicates {dup}; refined equal to official de-duplicated {same}, "
                     f"to official as is {same_raw}\n    workbench {labels(loc.neurons)}\n"
                     f"    official de-duplicated {labels(ref_d)}\n    official as is {labels(ref_o)}")
    print("\n".join(lines))
    rows.append(row("NeMo", f"localisation, zoo sd-memo ({len(prompts)} memorized prompts, guidance 0)",
                    statistics.median(wt), statistics.median(ot),
                    f"refined sets equal {equal}/{len(prompts)} (official as is: {equal_raw}/{len(prompts)})",
                    "medians per prompt"))
    return rows


# ------------------------------------------------------------------------------------ report
def table(rows: list[dict]) -> str:
    head = "| method | case | workbench s | official s | ratio | largest difference | note |"
    lines = [head, "|" + "---|" * 7]
    for r in rows:
        lines.append(f"| {r['method']} | {r['case']} | {r['work_s']:.3f} | {r['off_s']:.3f} | "
                     f"{r['ratio']:.2f} | {r['diff']} | {r['note']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--official", type=Path, required=True, help="folder holding the official repositories")
    ap.add_argument("--only", default="lrp,nemo,mathneuro,pissa")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--nemo-prompts", type=int, default=None, help="zoo prompts to localise (default all)")
    args = ap.parse_args(argv)
    site = args.official / "site"
    if site.is_dir():
        sys.path.append(str(site))
    torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    only = set(args.only.split(","))
    start = datetime.now(timezone.utc)
    print(f"start {start:%Y-%m-%d %H:%M} UTC  load {os.getloadavg()[0]:.2f}  cpus {os.cpu_count()}  "
          f"threads {args.threads}  torch {torch.__version__}  {platform.processor() or platform.machine()}"
          f"  GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")
    rows: list[dict] = []
    if "nemo" in only:
        rows += bench_nemo_zoo(args.official / NEMO_REPO, args.repeats, args.nemo_prompts)
    print(table(rows))
    print(f"end {datetime.now(timezone.utc):%H:%M} UTC  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return rows


if __name__ == "__main__":
    main()
