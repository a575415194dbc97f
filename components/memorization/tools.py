"""Memorization as MCP tools: the same services as the tab's handlers, with a picture where one carries
the result (registered in components.memorization)."""

# No `from __future__ import annotations`: gr.api reads the real type objects from the signatures
# (components.agents.tools) to build each tool's schema; each docstring's Args and Returns entry is one
# long line: Gradio's parser keeps only an entry's first line.
import gradio as gr

from backend.core import bounds

from components.agents.answers import _grid, _json, _png, _source

TOP_Z = 10  # neurons listed by check_memorization


def check_memorization(prompt: str) -> str:
    """Is this prompt memorized by the Memorization tab's Stable Diffusion model? (NeMo's detection)

    The score is the largest SSIM between the first noise predictions of different seeds (0-1);
    above theta_mem the model pulls every seed toward one image. Also the value neurons (output
    channels of the cross-attention to_v layers) whose activation on this prompt is most unusual
    (z = |a - mean| / std over non-memorized prompts). Cost: a noise step per seed (about a second).

    Args:
        prompt: the text prompt (1 to 300 characters).

    Returns:
        JSON: score, theta_mem, memorized (score > theta_mem), max_z, top_neurons (the 10 largest z as {neuron 'layer:channel', z}), layers, is_training_prompt, listed_type (the NeMo paper's memorization type when listed).
    """
    from backend.nemo import service

    r = service.check(prompt, source=_source())
    ranked = sorted(((z, f"{layer}:{c}") for layer, zs in r["z"].items() for c, z in enumerate(zs)), reverse=True)
    keep = ("prompt", "score", "theta_mem", "memorized", "max_z", "layers", "is_training_prompt", "listed_type")
    return _json({**{k: r[k] for k in keep}, "top_neurons": [{"neuron": n, "z": z} for z, n in ranked[:TOP_Z]]})


def find_memorization_neurons(prompt: str) -> str:
    """Localize the value neurons that hold a memorized prompt (NeMo's search).

    An initial set (z > theta plus the top-k activations, theta falling and k growing until
    switching them off breaks the seeds' agreement), refined greedily to the few that are needed.
    A prompt whose seeds never agree above theta_mem is skipped (not memorized). Cost: dozens of
    noise evaluations (seconds on the zoo model, minutes at full size). Nothing stays switched off.

    Args:
        prompt: the text prompt (1 to 300 characters).

    Returns:
        JSON: labels (the neurons found, 'layer:channel', pass them to generate_without_neurons), n_neurons, initial_labels, skipped, found, relaxed, threshold, theta, k, evaluations, seconds, seeds, seeds_kept, guidance_scale.
    """
    from backend.nemo import service

    loc = service.find(prompt, source=_source())
    return _json({k: v for k, v in loc.items() if k not in ("neurons", "initial", "history")})


def generate_without_neurons(prompt: str, neurons: list[str], seeds: int = 4) -> tuple[str, gr.FileData]:
    """Generate images for a prompt with all value neurons on and with the given neurons switched off.

    The neurons are multiplied by 0 at every denoising step (both guidance halves) for this call
    only, then restored. Compares each generation with the prompt's training image (SSIM, 0-1;
    high = a copy), diversity across seeds (1 - mean pairwise SSIM) and the memorization score.
    Cost: two generations per seed (about a second each on the zoo model).

    Args:
        prompt: the text prompt (1 to 300 characters).
        neurons: neurons to switch off, as 'layer:channel' labels (from find_memorization_neurons or check_memorization), e.g. ['mid.attn0:5']; an empty list switches none off.
        seeds: number of seeds (0, 1, ...), 1 to 8 (default 4).

    Returns:
        JSON: neurons switched off, seeds, ssim_on/ssim_off (per seed, null without a training image), diversity_on/off, alignment_on/off (share of the prompt's colours shown), score_on/off, theta_mem; and a PNG: the training image, then one row with the neurons on and one with them off.
    """
    from backend.nemo import service

    if isinstance(neurons, str):
        neurons = [neurons]
    if not isinstance(neurons, (list, tuple)) or not all(isinstance(x, str) for x in neurons):
        raise ValueError("neurons must be a list of labels like 'down1.attn0:17'.")
    n = bounds.check(bounds.MEMO_SEEDS, seeds)
    source = _source()
    m = service.get(source)
    spec = service.parse_neurons(m, [s for it in neurons for s in it.replace(";", ",").split(",")])
    c = service.compare(prompt, spec, list(range(n)), source=source)
    rows = [[c["train_image"]]] if c["train_image"] is not None else []
    rows += [list(c["images_on"]), list(c["images_off"])]
    data = {k: v for k, v in c.items() if k not in ("images_on", "images_off", "train_image")}
    return _json(data), _png(_grid(rows), "nemo")


def memorized_prompts() -> str:
    """List the prompts the Memorization tab's Stable Diffusion model is known to have memorized.

    Reads the model's prompt lists only (no model call; milliseconds). Pass one to
    check_memorization, find_memorization_neurons or generate_without_neurons; an ordinary prompt
    of your own for contrast.

    Returns:
        JSON: model, prompts (list of {prompt, type: the NeMo paper's memorization type, VM = verbatim}), n, has_training_images (whether generate_without_neurons can compare with the training image).
    """
    from backend.nemo import service

    d = service.describe(_source())
    rows = [{"prompt": p, "type": t} for p, t in zip(d["memorized"], d["memorized_types"])]
    return _json(
        {"model": d["model_id"], "prompts": rows, "n": len(rows), "has_training_images": d["has_train_images"]}
    )
