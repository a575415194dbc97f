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
import os
import platform
import statistics
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


# ------------------------------------------------------------------------------------ MambaLRP
def mamba_130m():
    """Random weights from state-spaces/mamba-130m-hf's config (nothing downloaded)."""
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=24,
                      intermediate_size=1536, conv_kernel=4, time_step_rank=48, use_conv_bias=True,
                      residual_in_fp32=True)
    return MambaForCausalLM(cfg).eval().requires_grad_(False)


def bench_lrp(folder: Path, repeats: int, lengths=(128, 512)) -> list[dict]:
    """One explanation (relevance of every token for the target logit at the last position): the
    official wrapper's slow path (their CUDA path needs mamba_ssm kernels; it also skips the SiLU
    rule) and relevance_propagation, against backend.lrp.attribute_text."""
    from backend.lrp import attribute_text

    with official_path(folder):
        from mamba_lrp.lrp.utils import relevance_propagation
        from mamba_lrp.model.mamba_huggingface import ModifiedMambaForCausalLM
    model = mamba_130m()
    explainable = ModifiedMambaForCausalLM(model, is_fast_forward_available=False).eval()
    vocab, target, rows = model.config.vocab_size, 42, []
    for n in lengths:
        ids = torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            emb = model.get_input_embeddings()(ids)

        def official():
            return torch.as_tensor(relevance_propagation(explainable, emb, torch.tensor([target]), vocab)[0])

        w, o, rw, ro = alternate(lambda: attribute_text(model, ids, target=target, method="mambalrp"),
                                 official, repeats)
        d = float((rw - ro).abs().max())
        rows.append(row("MambaLRP", f"one explanation, mamba-130m config, {n} tokens", w, o,
                        f"{d:.1e} (relevance max {float(ro.abs().max()):.2f})"))
    return rows


# ------------------------------------------------------------------------------------ MathNeuro
@contextlib.contextmanager
def observed_mathneuro():
    """Observation only, at the libraries' boundary (their GPL code is run, never read): every
    model transformers loads for them, with a copy of its weights as loaded, and every text their
    tokenizer encodes."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerBase

    models, texts = [], []
    load, encode = AutoModelForCausalLM.from_pretrained.__func__, PreTrainedTokenizerBase.encode

    def loading(cls, *a, **k):
        m = load(cls, *a, **k)
        models.append((m, {n: p.detach().clone() for n, p in m.named_parameters()}))
        return m

    def encoding(self, text, *a, **k):
        texts.append(text)
        return encode(self, text, *a, **k)

    AutoModelForCausalLM.from_pretrained = classmethod(loading)
    PreTrainedTokenizerBase.encode = encoding
    try:
        yield models, texts
    finally:
        AutoModelForCausalLM.from_pretrained = classmethod(load)
        PreTrainedTokenizerBase.encode = encode


def bench_mathneuro(folder: Path, proportion: float = 0.05) -> list[dict]:
    """Identification on the zoo math LM from one math and one non-math text (the paper's
    one-sample setting): their MathNeuro.py run in this process with --proportion and one repeat,
    its math-specific set read off the first model it prunes (the parameters it sets to 0), and
    the workbench's `identify` on the very strings their script encoded (their prompt template
    included). Their time is the whole script (it also loads the model several times and runs its
    evaluation); the workbench's is the identification alone."""
    import json
    import runpy

    from transformers import AutoTokenizer

    from backend.mathneuro import core

    zoo = ROOT / "assets" / "zoo" / "math-llama"
    tmp = Path(tempfile.mkdtemp(prefix="mathneuro-official-"))
    files = []
    for kind in ("math", "nonmath"):
        text = json.loads((zoo / f"ident_{kind}.json").read_text())[0]
        files.append(tmp / f"{kind}.csv")
        with files[-1].open("w", newline="") as f:  # their column names, from their error messages
            csv.writer(f).writerows([["question", "solution", "answer"], [text, "", ""]])
    argv = sys.argv
    sys.argv = ["MathNeuro.py", "--model", str(zoo), "--save_path", str(tmp / "out"), "--train_dataset",
                str(files[0]), "--calibration_datasets", str(files[1]), "--calibration_dataset_names", "Other",
                "--eval_datasets", "race", "--num_samples", "1", "--num_repeats", "1",
                "--proportion", str(proportion)]
    try:
        with official_path(folder), observed_mathneuro() as (models, texts), \
                contextlib.redirect_stdout(open(os.devnull, "w")):
            t0 = time.perf_counter()
            runpy.run_path(str(folder / "MathNeuro.py"), run_name="__main__")
            off_s = time.perf_counter() - t0
    finally:
        sys.argv = argv
    pruned = next(({n: (p.detach() == 0) & (w0[n] != 0) for n, p in m.named_parameters()}
                   for m, w0 in models if any(bool((p.detach() != w0[n]).any()) for n, p in m.named_parameters())),
                  None)
    base = models[0][0]
    tok = AutoTokenizer.from_pretrained(zoo)
    t0 = time.perf_counter()
    masks = core.identify(base, [texts[0]], [texts[1]], proportion, tokenizer=tok)
    work_s = time.perf_counter() - t0
    if pruned is None:
        diff = "their script pruned nothing"
    else:
        inter = sum(int((pruned[n] & masks[n].to(pruned[n].device)).sum()) for n in masks if n in pruned)
        union = core.count(masks) + sum(int(v.sum()) for v in pruned.values()) - inter
        diff = (f"sets: official {sum(int(v.sum()) for v in pruned.values())}, workbench "
                f"{core.count(masks)}, Jaccard {inter / max(1, union):.3f}")
    return [row("MathNeuro", f"identification, zoo math LM, 1 + 1 texts, top {proportion:g}", work_s, off_s, diff,
                "their time: the whole script")]


# ------------------------------------------------------------------------------------ PiSSA
def llama_for_pissa(folder: Path):
    """A Llama with 2 layers of 1024 × 2816 (14 linear weights), saved with the zoo math LM's
    tokenizer for the official script, which loads a model folder."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=1000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=2,
                      num_attention_heads=16, num_key_value_heads=16, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval().requires_grad_(False)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(ROOT / "assets" / "zoo" / "math-llama").save_pretrained(folder)
    return model


def bench_pissa(folder: Path, repeats: int, rank: int = 16) -> list[dict]:
    """Initialisation of every linear layer but the head, r = 16: the workbench (backend.pissa.
    adapters.adapt) against peft itself (get_peft_model on a copy, the same seed) and against
    GraphPKU/PiSSA's utils/init_pissa.py run in this process on the same model folder (their
    script loads the folder, initialises through peft and saves adapter and residual)."""
    import copy
    import runpy

    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file

    from backend.core.rng import seeded
    from backend.pissa.adapters import adapt

    tmp = Path(tempfile.mkdtemp(prefix="pissa-official-"))
    model = llama_for_pissa(tmp / "base")
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    rows = []
    for init in ("pissa", "pissa_niter_4"):
        niter = int(init.rsplit("_", 1)[1]) if "niter" in init else None

        def work():
            return adapt(model, "pissa", rank=rank, targets=targets, seed=0, niter=niter)

        def peft_itself():
            with seeded(0):
                return get_peft_model(copy.deepcopy(model), LoraConfig(
                    r=rank, lora_alpha=rank, lora_dropout=0.0, target_modules=targets, init_lora_weights=init))

        def script():
            out = tmp / init
            argv = sys.argv
            sys.argv = ["init_pissa.py", "--base_model_path", str(tmp / "base"), "--output_dir", str(out),
                        "--bits", "fp32", "--init_weights", init, "--lora_r", str(rank), "--lora_alpha",
                        str(rank), "--target_modules", *targets]
            try:
                with contextlib.redirect_stdout(open(os.devnull, "w")):
                    runpy.run_path(str(folder / "utils" / "init_pissa.py"), run_name="__main__")
            finally:
                sys.argv = argv
            return out

        def states(pm) -> dict[str, torch.Tensor]:
            """Adapter factors and residual weights by the base model's parameter names."""
            out = {}
            for k, v in pm.state_dict().items():
                k = k.replace("base_model.model.", "").replace(".base_layer", "").replace(".default", "")
                if "lora_" in k or k.endswith("proj.weight"):
                    out[k] = v.float()
            return out

        def script_states(out: Path) -> dict[str, torch.Tensor]:
            ad = {k.replace("base_model.model.", ""): v.float()
                  for k, v in load_file(out / "pissa_init" / "adapter_model.safetensors").items()}
            res = {k: v.float() for k, v in load_file(out / "model.safetensors").items() if k.endswith("proj.weight")}
            return {**ad, **res}

        def largest(a: dict, b: dict) -> str:
            keys = sorted(set(a) & set(b))
            if not keys or len(keys) != len(a):
                return f"{len(keys)}/{len(a)} tensors matched by name"
            # the factors of an SVD are unique up to the sign of each singular pair: compare the
            # adapter's product B·A and the residual, which are not
            prods = [k for k in keys if k.endswith("lora_A.weight")]
            dp = max(float((a[k.replace("_A", "_B")] @ a[k] - b[k.replace("_A", "_B")] @ b[k]).abs().max())
                     for k in prods)
            dr = max(float((a[k] - b[k]).abs().max()) for k in keys if "lora_" not in k)
            return f"B·A {dp:.1e}, W_res {dr:.1e}"

        w, o, pw, po = alternate(work, peft_itself, repeats)
        rows.append(row("PiSSA", f"init {init}, r={rank}, 14 linear layers (Llama 1024×2816, 2 layers) vs peft",
                        w, o, largest(states(pw), states(po))))
        w, o, pw, out = alternate(work, script, repeats)
        rows.append(row("PiSSA", f"init {init}, same layers, vs GraphPKU/PiSSA utils/init_pissa.py",
                        w, o, largest(states(pw), script_states(out)),
                        "their time includes loading the folder and saving adapter + residual"))
    return rows


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
        if stats is not None:
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
        lines.append(f"  prompt {i} ({state}, {wt[-1]:.2f} s vs {ot[-1]:.2f} s): initial J {inter:.2f}, "
                     f"official duplicates {dup}; refined equal to official de-duplicated {same}, "
                     f"to official as is {same_raw}\n    workbench {labels(loc.neurons)}\n"
                     f"    official de-duplicated {labels(ref_d)}\n    official as is {labels(ref_o)}")
    print("\n".join(lines))
    return (statistics.median(wt), statistics.median(ot),
            f"refined sets equal {equal}/{len(prompts)} (official as is: {equal_raw}/{len(prompts)})")


def bench_nemo_zoo(folder: Path, repeats: int, n_prompts: int | None) -> list[dict]:
    from backend.nemo import service

    m = service.get("zoo")
    stats = m.stats()
    off = OfficialNemo(folder, m.pipe, stats)
    prompts = [x["prompt"] for x in m.memorized][:n_prompts]
    seeds = m.num_seeds
    rows = [row("NeMo", f"noise difference + score, zoo sd-memo ({seeds} seeds, {len(prompts)} prompts)",
                *scores(off, prompts, seeds, repeats))]
    rows.append(row("NeMo", f"localisation, zoo sd-memo ({len(prompts)} memorized prompts, guidance 0)",
                    *localisations(off, stats, prompts, m.theta_mem, seeds), "medians per prompt"))
    return rows


def sd14_reduced():
    """Stable Diffusion 1.4's UNet layout (3 cross-attention down blocks of 2, a mid block: 7 value
    layers) at a tenth of its widths (32/64/128/128 channels, 576 value neurons), 16×16 latents,
    with a small random text encoder: a size at which dozens of evaluations fit on a CPU."""
    from diffusers import UNet2DConditionModel

    from benchmarks.fullsize import sd_pipeline
    from tests.unit.test_nemo import SD14_UNET

    pipe = sd_pipeline("tiny", torch.device("cpu"))
    torch.manual_seed(0)
    cfg = {k: v for k, v in SD14_UNET.items() if not k.startswith("_")}
    cfg.update(block_out_channels=[32, 64, 128, 128], norm_num_groups=8, sample_size=16,
               cross_attention_dim=pipe.text_encoder.config.hidden_size)
    pipe.unet = UNet2DConditionModel(**cfg).eval().requires_grad_(False)
    return pipe


def bench_nemo_sd14(folder: Path, repeats: int, n_prompts: int = 3) -> list[dict]:
    """Random weights memorize nothing: θ_mem is set just under the seeds' own agreement (as
    benchmarks.fullsize does), so that no seed is filtered out and the search runs its full
    course (θ down to 1, then the refinement against the last SSIM)."""
    from backend import nemo
    from backend.nemo.service import GENERIC_PROMPTS
    from benchmarks.fullsize import sd_pipeline

    seeds, rows = 4, []
    pipe = sd_pipeline("full", torch.device("cpu"))
    pipe.unet.register_to_config(sample_size=32)
    off = OfficialNemo(folder, pipe, None)
    rows.append(row("NeMo", f"noise difference + score, SD-1.4 config (full widths, 32×32 latents, {seeds} seeds)",
                    *scores(off, GENERIC_PROMPTS[:1], seeds, 1), "CPU: 32×32 latents instead of 64×64"))
    del pipe, off
    pipe = sd14_reduced()
    stats = nemo.neuron_stats(pipe, GENERIC_PROMPTS)
    off = OfficialNemo(folder, pipe, stats)
    prompts = GENERIC_PROMPTS[:n_prompts]
    agree = min(float(nemo.seed_agreement(nemo.noise_differences(pipe, p, range(seeds), guidance_scale=0)).min())
                for p in prompts)
    rows.append(row("NeMo", f"localisation, SD-1.4 layout at 1/10 width, 16×16 latents ({n_prompts} prompts, "
                    f"{seeds} seeds, θ_mem {agree - 1e-3:.3f})",
                    *localisations(off, stats, prompts, agree - 1e-3, seeds),
                    "reduced size for the CPU; medians per prompt"))
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
    ap.add_argument("--only", default="lrp,nemo,nemo_sd14,mathneuro,pissa")
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
    sections = {
        "lrp": lambda: bench_lrp(args.official / "MambaLRP", args.repeats),
        "mathneuro": lambda: bench_mathneuro(args.official / "MathNeuro"),
        "pissa": lambda: bench_pissa(args.official / "PiSSA", args.repeats),
        "nemo": lambda: bench_nemo_zoo(args.official / NEMO_REPO, args.repeats, args.nemo_prompts),
        "nemo_sd14": lambda: bench_nemo_sd14(args.official / NEMO_REPO, args.repeats),
    }
    rows: list[dict] = []
    for name, run in sections.items():
        if name in only:
            new = run()
            rows += new
            print("\n".join(table(new).splitlines()[2:]), flush=True)  # as each section ends
    print(table(rows))
    print(f"end {datetime.now(timezone.utc):%H:%M} UTC  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return rows


if __name__ == "__main__":
    main()
