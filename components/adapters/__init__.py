"""Adapters: PiSSA (Meng et al., 2024), principal singular vectors as adapter initialisation."""

from backend.core import bounds
from backend.core.zerogpu import MAX_DURATION

from components.adapters import layout
from components.adapters.tour import TOUR
from components.adapters.tools import pissa_layers, pissa_layer
from components.tab import AgentTool, Tab

TAB = Tab(
    id="adapters",
    title="Adapters",
    order=5,
    build=layout.build,
    paper="PiSSA (Meng et al., 2024)",
    card=(
        "Principal singular vectors as adapter initialisation: spectra, quantisation error and a live"
        " LoRA-vs-PiSSA fine-tuning race."
    ),
    summary="PiSSA: principal singular vectors as adapter init; quantization error; live LoRA vs PiSSA race.",
    explain=layout.EXPLAIN,
    presenter_caption=layout.PRESENTER_CAPTION,
    link_runs=("layers", "analyse"),
    report_results={
        "pissa-spectrum": "Spectrum and PiSSA split",
        "pissa-error-table": "Quantization error",
        "pissa-race": "LoRA vs PiSSA race",
        "pissa-convert-result": "PiSSA to LoRA conversion",
    },
    report_pins={"pissa-pin": "pissa-spectrum"},
    key_figure="#pissa-spectrum",
    first_view_drawn=(
        "document.querySelector('#pissa-spectrum .js-plotly-plot') && document.querySelector('#pissa-hist .js-plotly-plot')"
        " && document.querySelector('#pissa-race-live .wb-race-live svg')"
        " && document.querySelector('#pissa-race-live .wb-race-live').offsetHeight > 100"
    ),
    tour=TOUR,
    tools=(
        AgentTool(pissa_layers, reads_model=True, intervention=False, cost="loads the model once, then milliseconds"),
        AgentTool(
            pissa_layer,
            reads_model=True,
            intervention=False,
            cost="one SVD, milliseconds on the zoo",
            ranges={"rank": bounds.PISSA_RANK, "init": bounds.PISSA_INITS},
        ),
    ),
    gpu_seconds=MAX_DURATION,
)
