"""Model-touching calls with conflicting interventions, per endpoint (only those the app serves
are used). Each pair of calls on one endpoint applies a different intervention to the same shared
model: different LRP rule sets, scale factors / pruning, feature clamps, neuron masks."""

from __future__ import annotations

from tests.load.harness import Call

TEXT = "the film was wonderful though the plot was slow"
MEMORIZED = "a purple cross and a yellow circle and a blue triangle on a green background"

SCENARIOS: list[Call] = [
    # Relevance: rule-set ablations on one shared Mamba.
    Call("/explain_text", (TEXT, ["mambalrp", "gi"], ["norm", "silu", "ssm", "gate"], "", True), "lrp-all-rules"),
    Call("/explain_text", (TEXT, ["mambalrp"], ["norm"], "", True), "lrp-norm-only"),
    Call("/explain_text", (TEXT, ["mambalrp"], ["ssm", "gate"], "", False), "lrp-ssm-gate"),
    # Math neurons: prune vs scale vs baseline on one shared Llama.
    Call("/mn_evaluate", ("MathNeuro", 15, 0.0, 8), "math-prune"),
    Call("/mn_evaluate", ("MathNeuro", 15, 1.2, 8), "math-scale"),
    Call("/mn_evaluate", ("Random (same count)", 10, 0.0, 8), "math-random-prune"),
    Call("/mn_ask", ("What is 3 plus 4?", "MathNeuro", 15, 0.0, 8), "math-ask-pruned"),
    Call("/mn_ask", ("What is 3 plus 4?", "Wanda (no subtraction)", 5, 1.5, 8), "math-ask-scaled"),
    # Features: different feature clamps on one shared LLaVA (held-out example 3).
    Call("/steer", (None, "3", 5, 20.0, "image", False, True), "sae-clamp-5"),
    Call("/steer", (None, "3", 9, 12.0, "image", True, False), "sae-clamp-9-with-error"),
    Call("/steer", (None, "3", 9, 0.0, "prompt", False, False), "sae-zero-9"),
    # Memorization: different neuron masks on one shared UNet, for a memorized prompt.
    Call("/memo_generate", (MEMORIZED, [], "", 1), "nemo-no-neurons"),
    Call("/memo_generate", (MEMORIZED, [], "mid.attn0:0, mid.attn0:1, down0.attn0:2", 1), "nemo-three-neurons"),
    Call("/memo_generate", (MEMORIZED, [], "down0.attn0:5", 1), "nemo-one-neuron"),
]


def available(calls: list[Call], endpoints: set[str]) -> list[Call]:
    return [c for c in calls if c.api_name in endpoints]


# The soak mixes the intervention calls with cheap reads across every tab.
SOAK: list[Call] = SCENARIOS + [
    Call("/status", (), "status"),
    Call("/mn_figure2", (15, 8), "math-figure2"),
    Call("/feature_page", (3,), "sae-feature-page"),
    Call("/memo_check", (MEMORIZED,), "nemo-check"),
    Call("/analyse", ("pissa-toy", "fc2", 8, "pissa_niter_4"), "pissa-analyse"),
]
