"""Which of a user's own models the Adapters tab takes (backend.core.modelcheck asks): PiSSA splits
nn.Linear weights, of any transformers model that has them."""

from __future__ import annotations

from backend.core.modelcheck import MethodRule, linear_layers_problem, register_rule
from backend.core.modelmeta import ModelMeta

from . import TAB


def problem(meta: ModelMeta) -> str | None:
    return linear_layers_problem(meta, TAB, "PiSSA adapts")


RULE = register_rule(MethodRule(method=TAB, problem=problem, order=5, aliases=("pissa",)))
