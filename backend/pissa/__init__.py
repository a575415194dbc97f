"""PiSSA (Meng et al., 2024): principal singular values and vectors as adapter initialisation.

    from backend.pissa import singular_spectrum, pissa_split, error_reduction_ratio
    from backend.pissa import nf4_quantize, nf4_dequantize, adapt, race, RaceConfig

PiSSA / LoRA initialisations go through peft (`init_lora_weights="pissa"` / `"pissa_niter_N"`);
LoftQ and QPiSSA run on CPU with the project's NF4 quantizer (`backend.pissa.nf4`).
"""

from backend.core.presets import Preset, register

from .adapters import (
    ADAPTER_METHODS,
    adapt,
    convert_pissa_to_lora,
    default_targets,
    linear_layers,
    reconstruction_error,
)
from .decompose import (
    METHODS,
    error_reduction_ratio,
    loftq_cpu,
    low_rank,
    pissa_split,
    planted_spike,
    qpissa_cpu,
    quantized_approximation,
    singular_spectrum,
)
from .nf4 import NF4_PUBLISHED, NF4Tensor, nf4_dequantize, nf4_levels, nf4_quantize, nf4_roundtrip
from .race import DigitsTask, LMTask, RaceConfig, race

TAB = "adapters"

# The zoo default first (the paper's toy), then the zoo LM, then the papers' Llama/Mistral-class
# checkpoints for a GPU Space. Every one loads through `from_pretrained`.
PRESETS = [
    register(
        Preset(
            TAB,
            "zoo",
            "pissa-toy",
            "backend.pissa.toy.DigitsMLP",
            label="digits MLP (the paper's toy)",
            extra={"task": "digits"},
        )
    ),
    register(
        Preset(
            TAB,
            "zoo",
            "math-llama",
            "transformers.LlamaForCausalLM",
            label="math-llama (tiny Llama)",
            extra={"task": "lm"},
        )
    ),
    register(
        Preset(
            TAB,
            "hub",
            "meta-llama/Llama-2-7b-hf",
            "transformers.LlamaForCausalLM",
            label="LLaMA-2-7B (paper)",
            extra={"task": "lm"},
        )
    ),
    register(
        Preset(
            TAB,
            "hub",
            "mistralai/Mistral-7B-v0.1",
            "transformers.MistralForCausalLM",
            label="Mistral-7B (paper)",
            extra={"task": "lm"},
        )
    ),
]

__all__ = [
    "ADAPTER_METHODS",
    "METHODS",
    "NF4_PUBLISHED",
    "NF4Tensor",
    "PRESETS",
    "DigitsTask",
    "LMTask",
    "RaceConfig",
    "adapt",
    "convert_pissa_to_lora",
    "default_targets",
    "error_reduction_ratio",
    "linear_layers",
    "loftq_cpu",
    "low_rank",
    "nf4_dequantize",
    "nf4_levels",
    "nf4_quantize",
    "nf4_roundtrip",
    "pissa_split",
    "planted_spike",
    "qpissa_cpu",
    "quantized_approximation",
    "race",
    "reconstruction_error",
    "singular_spectrum",
]
