"""Math neurons: MathNeuro's math-specific parameters (Christ et al., 2024), pruned or scaled live."""

from backend.core import bounds

from components.math_neurons import layout, words
from components.math_neurons.tour import TOUR
from components.math_neurons.tools import math_neurons
from components.tab import AgentTool, Tab

TAB = Tab(
    id="math_neurons",
    title="Math neurons",
    order=4,
    build=layout.build,
    paper="MathNeuro (Christ et al., 2024)",
    card=(
        "Find the parameters that matter for arithmetic but not for language; prune or scale them and"
        " watch both accuracies move."
    ),
    summary="MathNeuro: find math-specific parameters, prune or scale them, watch math vs non-math accuracy.",
    explain=words.EXPLAIN,
    presenter_caption=layout.PRESENTER_CAPTION,
    link_runs=("mn_evaluate",),  # a deep link reruns the accuracies of its setting (components.links.deep_links)
    report_results={
        "mn-accfig": "Math and non-math accuracy",
        "mn-fig2": "Pruning by method",
        "mn-curve": "Accuracy by scale factor",
        "mn-cons": "Consistency across sample sizes",
        "mn-ask-out": "Ask the model",
    },
    report_pins={"mn-pin": "mn-accfig"},
    key_figure="#mn-accfig",
    first_view_drawn="document.querySelector('#mn-accfig .js-plotly-plot')",
    tour=TOUR,
    tools=(
        AgentTool(
            math_neurons,
            reads_model=True,
            intervention=True,
            cost="seconds on the zoo, a minute or more at 1B",
            ranges={"k_percent": bounds.MATH_K, "factor": bounds.MATH_FACTOR, "n_samples": bounds.MATH_SAMPLES},
        ),
    ),
    gpu_seconds=180,
)
