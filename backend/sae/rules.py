"""Which of a user's own models the Features tab takes (backend.core.modelcheck asks): the SAE reads
the language model's residual stream behind LLaVA's vision tower and projector."""

from __future__ import annotations

from backend.core.modelcheck import MethodRule, register_rule
from backend.core.modelmeta import ModelMeta

from .organism import TAB

# LLaVA and its successors that keep LLaVA's vision tower → projector → language model layout.
LLAVA = (
    "LlavaForConditionalGeneration",
    "LlavaNextForConditionalGeneration",
    "LlavaNextVideoForConditionalGeneration",
    "LlavaOnevisionForConditionalGeneration",
)


def problem(meta: ModelMeta) -> str | None:
    if meta.architecture not in LLAVA:
        return f"{meta.architecture}: the Features tab needs a LLaVA-family vision-language model ({', '.join(LLAVA)})"
    return None


RULE = register_rule(MethodRule(method=TAB, problem=problem, order=2, aliases=("sae",), architectures=LLAVA))
