"""NeMo: detection scores and neuron localisation by the official code beside backend.nemo."""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import importlib.util
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

import torch

from benchmarks.vs_official.common import alternate, cuda_calls_on_cpu, official_path, row


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
            return types.SimpleNamespace(
                transformer_blocks=[types.SimpleNamespace(attn2=types.SimpleNamespace(to_v=to_v))]
            )

        blocks = [types.SimpleNamespace(attentions=[holder(self.names[2 * b + a]) for a in range(2)]) for b in range(3)]
        self.down_blocks, self.mid_block = blocks, types.SimpleNamespace(attentions=[holder(self.names[6])])

    def to(self, *a, **k):  # glue (device): the model is already where it runs
        return self

    def __call__(self, *args, **kw):
        for f in self.fillers:
            f(kw["encoder_hidden_states"])
        return self.unet(*args, **kw)

    def stats_lists(self, stats):
        """The workbench's μ, σ in the official file's layout (one tensor per slot)."""
        return (
            [stats.mean[n] if n else torch.zeros(0) for n in self.names],
            [stats.std[n] if n else torch.zeros(0) for n in self.names],
        )

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
            return drawn[: shape[0][0]].clone()
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
        if stats is not None:
            torch.save(self.unet.stats_lists(stats), self.stats_file)
        sys.modules.setdefault(
            "rtpt",
            types.SimpleNamespace(  # glue: a progress-title helper
                RTPT=lambda *a, **k: types.SimpleNamespace(start=lambda: None, step=lambda: None)
            ),
        )
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
            d = ad.compute_noise_diff(
                [prompt],
                self.pipe.tokenizer,
                self.pipe.text_encoder,
                self.unet,
                self._scheduler(),
                blocked_indices=None,
                guidance_scale=0,
                seed=1,
                samples_per_prompt=seeds,
                scaling_factor=0.0,
            )
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
            version=str(self.stats_file),
            dataset=str(data),
            output=str(out),
            seed=1,
            samples_per_prompt=seeds,
            num_inference_steps=50,
            scaling_factor=0.0,
            pairwise_ssim_threshold=theta_mem,
            ssim_threshold_initial_selection=theta_mem,
            ssim_threshold_refinement=theta_mem,
            rel_threshold_refinement=None,
            guidance_scale=0.0,
            theta_reduction_per_step=0.25,
            min_theta=1.0,
            no_theta=False,
            initial_theta=5.0,
            no_top_k=False,
            initial_k=0,
            name="XX",
            continue_run=False,
        )
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
        return (
            self.unet.spec(ast.literal_eval(res["Initial Neurons"])),
            self.unet.spec(ast.literal_eval(res["Refined Neurons"])),
        )


def labels(spec) -> str:
    from backend import nemo

    return " ".join(f"{nemo.short_name(n)}:{c}" for n, c in sorted(as_set(spec))) or "-"


def as_set(spec) -> set:
    return {(n, int(c)) for n, cs in spec.items() for c in cs}


def scores(off: OfficialNemo, prompts, seeds: int, repeats: int) -> tuple[float, float, str]:
    """Noise differences and score at guidance 0 (their CFG reads the batch halves swapped, so
    guidance 0 is where both define the same quantity) → median seconds and largest differences."""
    from backend import nemo

    def work(p):
        d = nemo.noise_differences(off.pipe, p, range(seeds), guidance_scale=0.0)
        return d, float(nemo.pairwise_ssim(d).max())

    dd, ds, tw, to = 0.0, 0.0, [], []
    for p in prompts:
        w, o, (dw, sw), (do, so) = alternate(lambda: work(p), lambda: off.score(p, seeds), repeats)
        tw.append(w)
        to.append(o)
        dd, ds = max(dd, float((dw - do).abs().max())), max(ds, abs(sw - so))
    return statistics.median(tw), statistics.median(to), f"noise diff {dd:.1e}, score {ds:.1e}"


def localisations(off: OfficialNemo, stats, prompts, theta_mem: float, seeds: int) -> tuple[float, float, str]:
    """Each prompt localised by both (the official as is and de-duplicated) → median seconds and
    how many refined sets are equal; one line per prompt printed."""
    from backend import nemo

    equal, equal_raw, wt, ot, lines = 0, 0, [], [], []
    for i, p in enumerate(prompts):
        t0 = time.perf_counter()
        init_o, ref_o = off.localize(p, theta_mem, seeds)
        ot.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        loc = nemo.localize(off.pipe, p, stats, theta_mem, num_seeds=seeds, guidance_scale=0.0)
        wt.append(time.perf_counter() - t0)
        _, ref_d = off.localize(p, theta_mem, seeds, dedup=True)
        same, same_raw = as_set(loc.neurons) == as_set(ref_d), as_set(loc.neurons) == as_set(ref_o)
        equal, equal_raw = equal + same, equal_raw + same_raw
        inter = len(as_set(loc.initial) & as_set(init_o)) / max(1, len(as_set(loc.initial) | as_set(init_o)))
        dup = sum(len(v) - len(set(v)) for v in init_o.values())
        state = "skipped" if loc.skipped else "relaxed" if loc.relaxed else "found"
        lines.append(
            f"  prompt {i} ({state}, {wt[-1]:.2f} s vs {ot[-1]:.2f} s): initial J {inter:.2f}, "
            f"official duplicates {dup}; refined equal to official de-duplicated {same}, "
            f"to official as is {same_raw}\n    workbench {labels(loc.neurons)}\n"
            f"    official de-duplicated {labels(ref_d)}\n    official as is {labels(ref_o)}"
        )
    print("\n".join(lines))
    return (
        statistics.median(wt),
        statistics.median(ot),
        f"refined sets equal {equal}/{len(prompts)} (official as is: {equal_raw}/{len(prompts)})",
    )


def bench_nemo_zoo(folder: Path, repeats: int, n_prompts: int | None) -> list[dict]:
    from backend.nemo import service

    m = service.get("zoo")
    stats = m.stats()
    off = OfficialNemo(folder, m.pipe, stats)
    prompts = [x["prompt"] for x in m.memorized][:n_prompts]
    seeds = m.num_seeds
    rows = [
        row(
            "NeMo",
            f"noise difference + score, zoo sd-memo ({seeds} seeds, {len(prompts)} prompts)",
            *scores(off, prompts, seeds, repeats),
        )
    ]
    rows.append(
        row(
            "NeMo",
            f"localisation, zoo sd-memo ({len(prompts)} memorized prompts, guidance 0)",
            *localisations(off, stats, prompts, m.theta_mem, seeds),
            "medians per prompt",
        )
    )
    return rows


def sd14_reduced():
    """Stable Diffusion 1.4's UNet layout (3 cross-attention down blocks of 2, a mid block: 7 value
    layers) at a tenth of its widths (32/64/128/128 channels, 576 value neurons), 16×16 latents,
    with a small random text encoder: a size at which dozens of evaluations fit on a CPU."""
    from diffusers import UNet2DConditionModel

    from benchmarks.fullsize_parts import sd_pipeline
    from tests.unit.test_nemo import SD14_UNET

    pipe = sd_pipeline("tiny", torch.device("cpu"))
    torch.manual_seed(0)
    cfg = {k: v for k, v in SD14_UNET.items() if not k.startswith("_")}
    cfg.update(
        block_out_channels=[32, 64, 128, 128],
        norm_num_groups=8,
        sample_size=16,
        cross_attention_dim=pipe.text_encoder.config.hidden_size,
    )
    pipe.unet = UNet2DConditionModel(**cfg).eval().requires_grad_(False)
    return pipe


def bench_nemo_sd14(folder: Path, repeats: int, n_prompts: int = 3) -> list[dict]:
    """Random weights memorize nothing: θ_mem is set just under the seeds' own agreement (as
    benchmarks.fullsize does), so that no seed is filtered out and the search runs its full
    course (θ down to 1, then the refinement against the last SSIM)."""
    from backend import nemo
    from backend.nemo.service import GENERIC_PROMPTS
    from benchmarks.fullsize_parts import sd_pipeline

    seeds, rows = 4, []
    pipe = sd_pipeline("full", torch.device("cpu"))
    pipe.unet.register_to_config(sample_size=32)
    off = OfficialNemo(folder, pipe, None)
    rows.append(
        row(
            "NeMo",
            f"noise difference + score, SD-1.4 config (full widths, 32×32 latents, {seeds} seeds)",
            *scores(off, GENERIC_PROMPTS[:1], seeds, 1),
            "CPU: 32×32 latents instead of 64×64",
        )
    )
    del pipe, off
    pipe = sd14_reduced()
    stats = nemo.neuron_stats(pipe, GENERIC_PROMPTS)
    off = OfficialNemo(folder, pipe, stats)
    prompts = GENERIC_PROMPTS[:n_prompts]
    agree = min(
        float(nemo.seed_agreement(nemo.noise_differences(pipe, p, range(seeds), guidance_scale=0)).min())
        for p in prompts
    )
    rows.append(
        row(
            "NeMo",
            f"localisation, SD-1.4 layout at 1/10 width, 16×16 latents ({n_prompts} prompts, "
            f"{seeds} seeds, θ_mem {agree - 1e-3:.3f})",
            *localisations(off, stats, prompts, agree - 1e-3, seeds),
            "reduced size for the CPU; medians per prompt",
        )
    )
    return rows
