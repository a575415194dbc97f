"""The Math neurons tab's models: the zoo organism (default) and the paper's instruct LM."""

from __future__ import annotations

from ..core.presets import Preset, register

TAB = "math_neurons"

ZOO_PRESET = register(
    Preset(
        tab=TAB,
        source="zoo",
        path_or_id="math-llama",
        model_class="transformers.LlamaForCausalLM",
        label="math-llama (zoo: arithmetic word problems + a fact language)",
        extra={
            "math": "eval_math.json",
            "nonmath": "eval_nonmath.json",
            "ident_math": "ident_math.json",
            "ident_nonmath": "ident_nonmath.json",
        },
    )
)

# The paper's smallest model. Its data sets load only where a hub is reachable (GPU Space):
# GSM8K as D_math, RACE and MMLU as D_non-math, as in the paper's Figure 2.
HUB_PRESET = register(
    Preset(
        tab=TAB,
        source="hub",
        path_or_id="meta-llama/Llama-3.2-1B-Instruct",
        model_class="transformers.LlamaForCausalLM",
        label="Llama 3.2 1B Instruct (paper)",
        extra={"math": "openai/gsm8k:main", "nonmath": ["ehovy/race:all", "cais/mmlu:all"]},
    )
)
