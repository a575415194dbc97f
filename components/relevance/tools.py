"""Relevance as an MCP tool: the same service as the tab's handler (registered in components.relevance)."""

# No `from __future__ import annotations`: gr.api reads the real type objects from the signatures
# (components.agents.tools) to build each tool's schema; each docstring's Args and Returns entry is one
# long line: Gradio's parser keeps only an entry's first line.
from typing import Literal

from components.agents.answers import _json, _source

RelMethod = Literal["mambalrp", "lrp_ln", "gi", "smoothgrad", "ig", "attnroll", "mambaattr"]
RelRule = Literal["norm", "silu", "ssm", "gate"]


def token_relevance(
    text: str,
    methods: list[RelMethod] | None = None,
    rules: list[RelRule] | None = None,
    target: str = "",
    model: str = "",
) -> str:
    """Explain a Mamba language model's prediction as relevance per input token (MambaLRP and baselines).

    Runs the text through the Relevance tab's Mamba LM and attributes the target's logit at the last
    position to every input token. MambaLRP's relevance sums to that logit (conservation) when all
    four rules are on; dropping a rule breaks it. Cost: about a second per method on a CPU for a
    sentence (IG and SmoothGrad take tens of passes); at most 256 tokens.

    Args:
        text: the input text (1 to 256 tokens, at most 2,000 characters).
        methods: attribution methods, any of mambalrp, lrp_ln (LRP with only the norm rule), gi (Gradient×Input), smoothgrad, ig (Integrated Gradients), attnroll (attention rollout), mambaattr (Mamba's hidden attention); default mambalrp, gi, ig, mambaattr.
        rules: MambaLRP rules to apply, any of norm, silu, ssm, gate; default all four (leave one out to ablate it).
        target: the word or token whose logit is explained; empty = the model's own top prediction.
        model: a text model of the tab (its hub id or zoo folder); empty = the tab's default.

    Returns:
        JSON: tokens, per-method relevance per token (same order as tokens; signed for mambalrp, lrp_ln, gi, smoothgrad, ig; non-negative for attnroll and mambaattr), target and its logit, sum_relevance per method, top_next predictions, conv_bias (true means the conv bias absorbs part of the logit).
    """
    from backend.lrp import service as svc

    if not isinstance(text, str):
        raise ValueError("text must be a string.")
    methods = ["mambalrp", "gi", "ig", "mambaattr"] if methods is None else list(methods)
    rules = list(svc.RULES) if rules is None else list(rules)
    svc.check_text_request(text, methods, rules)
    m = svc.load_text(_source(), model or None)
    return _json(svc.explain_text(m, text, methods, rules, target or None))
