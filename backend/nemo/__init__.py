"""NeMo: localizing the neurons that hold memorized prompts in Stable Diffusion (Hintersdorf et al.,
NeurIPS 2024), as a plain torch/diffusers library (no gradio)."""
from .core import (NeuronStats, activations, count, deactivate, encode_prompts,
                   generate, initial_latents, layer_sizes,
                   memorization_score, neuron_stats, noise_differences, random_like,
                   SEARCH_GUIDANCE, seed_agreement,
                   short_name, validate_spec, value_layers, zscores)
from .search import Localization, initial_selection, localize, refine
from .metrics import auroc, diversity, minmax_per_channel, pairwise_ssim, ssim, ssim_images

__all__ = ["Localization", "NeuronStats", "activations", "count", "deactivate", "encode_prompts",
           "generate", "initial_latents", "initial_selection", "layer_sizes", "localize",
           "memorization_score", "neuron_stats", "noise_differences", "random_like", "refine",
           "short_name", "validate_spec", "value_layers", "zscores", "SEARCH_GUIDANCE", "seed_agreement", "auroc", "diversity",
           "minmax_per_channel", "pairwise_ssim", "ssim", "ssim_images"]
