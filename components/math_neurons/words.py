"""What the Math neurons tab says: the explanation of the variant and data in use (the zoo's
organism, or a real LM with GSM8K and a non-math set), the labels that follow the picked model, the
data card and the example questions."""

from __future__ import annotations

import html

from backend.mathneuro import sets

EXPLAIN = (
    "<div class='wb-explain'><b>What you see.</b> MathNeuro scores every weight of every linear "
    "layer (the untied lm_head included, as in the paper) by <i>|W<sub>ij</sub>| · ‖X<sub>j</sub>‖</i> summed over samples (forward passes only), "
    "takes the top K % per matrix on <b>math</b> problems and removes those that are also top K % on "
    "<b>non-math</b> text: what is left is math-specific. Scale those weights by the factor "
    "(0 prunes them, 1.1 is the paper's boost) and the model answers the held-out sets again: "
    "<b>math</b> = arithmetic word problems of 2 or 3 steps with operand pairs never seen in "
    "training, answered with the worked solution (“25 + 36 = 61 . 61 - 12 = 49”: one slip fails), "
    "<b>non-math</b> = questions about the organism's world (who lives where, owns which pet, …) "
    "after a story never seen in training; both scored by exact match of the greedy answer. Your "
    "own sets (files above, prompt + answer in the organism's words) replace either side. "
    "Baselines: Wanda (the math top K without subtraction), random weights (same count per matrix), "
    "LAPE (MLP neurons by activation-probability entropy). The model is restored bit-exactly after "
    "every evaluation.</div>"
)


def explain_hub(preset, template: str | None = None) -> str:
    """The hub preset's (or a user's own model's) explanation: what is loaded and how answers are
    scored; `template` as the data card words it (service.describe), so the two agree."""
    n = sets.UI_EVAL
    return (
        "<div class='wb-explain'><b>What you see.</b> MathNeuro scores every weight of every linear "
        "layer by <i>|W<sub>ij</sub>| · ‖X<sub>j</sub>‖</i> summed over samples (forward passes only; a "
        "tied lm_head is skipped), takes the top K % per matrix on <b>math</b> samples and removes those "
        "that are also top K % on <b>non-math</b> samples. Scale those weights by the factor (0 prunes, "
        "1.1 is the paper's boost) and the model answers again.<br>"
        f"<b>Model:</b> <code>{html.escape(preset.path_or_id)}</code> ({html.escape(preset.label)}), every "
        f"question in {html.escape(template or 'its own chat template')}, answered greedily. "
        f"<b>Math:</b> GSM8K (shipped, MIT): samples from the train split identify, the first {n} test "
        "problems score; a problem is right when the last number of the model's answer equals the number "
        "after “####” in the reference. <b>Non-math:</b> the file you name below (JSONL / CSV with prompt or "
        "question + answer, optionally choices, or plain text one per line), or the deployment's set "
        f"(<code>{sets.NONMATH_ENV}</code>, or RACE + MMLU through <code>datasets</code> where the hub "
        "is reachable, else the shipped COCO captions as plain text); multiple choice is scored by the letter the model names first, other answers by "
        "their normalised text, plain text by next-token accuracy. Its first half identifies, the rest "
        "scores. <b>Your own math</b> (file or dataset id above) replaces GSM8K the same way: an answer "
        "with a number is scored by its final number (after “####”, else the last one in it), multiple "
        "choice by the letter, plain text by next-token accuracy. "
        "Baselines: Wanda, random weights (same count per matrix), LAPE. The model is restored "
        "bit-exactly after every evaluation.</div>"
    )


def explain_for(preset, template: str | None = None) -> str:
    return EXPLAIN if preset.source == "zoo" else explain_hub(preset, template)


def samples_label(zoo: bool) -> str:
    return (
        "Sample answers (greedy, ✓ = exact match)" if zoo else "Sample answers (greedy, ✓ = right under the set's rule)"
    )


def ask_label(preset) -> str:
    return (
        "Ask your own question (the organism's language)"
        if preset.source == "zoo"
        else "Ask your own question (answered as a GSM8K problem is)"
    )


def data_html(info: dict) -> str:
    """The data status card: what the tab is using right now (or what it still needs)."""
    non = (
        f"<b>non-math:</b> {html.escape(info['nonmath'])} · scored by {html.escape(info['nonmath_rule'])}"
        if info.get("nonmath")
        else f"<b>non-math: none loaded</b> ({html.escape(info.get('nonmath_error') or 'no set named')}). "
        "Name a non-math file above to identify and evaluate."
    )
    tmpl = f" · prompts in {html.escape(info['template'])}" if info.get("template") else ""
    return (
        f"<div class='wb-card' style='min-height:0'><b>model:</b> <code>{html.escape(info['model'])}</code>"
        f"{tmpl}<br><b>math:</b> {html.escape(info['math'])} · scored by {html.escape(info['math_rule'])}"
        f"<br>{non}</div>"
    )


ASK_EXAMPLES = {
    "zoo": [
        "ann has 23 pens . she finds 45 more . how many pens does ann have now ?",
        "bob has 57 cards . he loses 19 . then he finds 8 more . how many cards does bob have now ?",
        "one day kim went to the lake . she was calm . where does ann live ?",
    ],
    "hub": [
        "Tom has 23 pens and finds 45 more. How many pens does he have now?",
        "A baker makes 12 trays of 8 rolls and sells 57 rolls. How many rolls are left?",
        "What is the capital of Norway?",
    ],
}
