"""Which of a user's own models the Math neurons tab takes (backend.core.modelcheck asks): MathNeuro
scores nn.Linear weights on next-token losses, so a causal LM built of nn.Linear layers."""

from __future__ import annotations

from backend.core.modelcheck import MethodRule, linear_layers_problem, register_rule
from backend.core.modelmeta import ModelMeta

from .presets import TAB


def problem(meta: ModelMeta) -> str | None:
    arch = meta.architecture
    why = linear_layers_problem(meta, TAB, "MathNeuro scores")
    if why is None and not arch.endswith("ForCausalLM"):
        return f"{arch}: MathNeuro needs a causal language model (a …ForCausalLM class)"
    return why


RULE = register_rule(MethodRule(method=TAB, problem=problem, order=4, aliases=("math", "mathneuro")))
