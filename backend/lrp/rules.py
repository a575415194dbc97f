"""Which of a user's own models the Relevance tab takes (backend.core.modelcheck asks): MambaLRP's
rules are written for the Mamba block of transformers' Mamba and Falcon-Mamba."""

from __future__ import annotations

from backend.core.modelcheck import MethodRule, register_rule
from backend.core.modelmeta import ModelMeta

from .models import TAB

MAMBA = ("MambaForCausalLM", "FalconMambaForCausalLM")


def problem(meta: ModelMeta) -> str | None:
    if meta.architecture not in MAMBA:
        return f"{meta.architecture}: MambaLRP needs a Mamba model (MambaForCausalLM or FalconMambaForCausalLM)"
    return None


RULE = register_rule(MethodRule(method=TAB, problem=problem, order=1, aliases=("mambalrp", "lrp"), architectures=MAMBA))
