"""Memorization: NeMo on Stable Diffusion (Hintersdorf et al., 2024)."""

from backend.core import bounds
from backend.core.zerogpu import MAX_DURATION

from components.memorization import layout
from components.memorization.tour import TOUR
from components.memorization.tools import (
    check_memorization,
    find_memorization_neurons,
    generate_without_neurons,
    memorized_prompts,
)
from components.tab import AgentTool, Tab

TAB = Tab(
    id="memorization",
    title="Memorization",
    order=3,
    build=layout.build,
    paper="NeMo (Hintersdorf et al., 2024)",
    card=(
        "Does Stable Diffusion copy a training image for this prompt? Find the few neurons that hold "
        "the copy and switch them off."
    ),
    summary="NeMo: detect memorized prompts in Stable Diffusion, localize the neurons, switch them off.",
    explain=layout.EXPLAIN,
    presenter_caption=layout.PRESENTER_CAPTION,
    link_runs=("memo_check", "memo_generate"),
    report_results={
        "memo-score": "Memorization check",
        "memo-z": "Neurons found (NeMo)",
        "memo-gallery": "Generations with the neurons off",
        "memo-batch-table": "Batch detection",
        "memo-table": "Memorized prompts",
    },
    report_pins={"memo-pin": "memo-gallery"},
    key_figure="#memo-compare",
    first_view_drawn=(
        "document.querySelector('#memo-score .wb-card') && document.querySelector('#memo-z .js-plotly-plot')"
        " && document.querySelector('#memo-compare img')"
    ),
    tour=TOUR,
    tools=(
        AgentTool(
            check_memorization, reads_model=True, intervention=False, cost="a noise step per seed, about a second"
        ),
        AgentTool(
            find_memorization_neurons, reads_model=True, intervention=True, cost="dozens of noise evaluations, seconds"
        ),
        AgentTool(
            generate_without_neurons,
            reads_model=True,
            intervention=True,
            cost="two generations per seed, seconds",
            ranges={"seeds": bounds.MEMO_SEEDS},
        ),
        AgentTool(
            memorized_prompts, reads_model=False, intervention=False, cost="milliseconds (reads the prompt lists)"
        ),
    ),
    gpu_seconds=MAX_DURATION,
)
