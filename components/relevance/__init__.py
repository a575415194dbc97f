"""Relevance: which tokens and pixels a Mamba model relies on (MambaLRP, Jafari et al., 2024)."""

from components.relevance import layout
from components.relevance.tour import TOUR
from components.relevance.tools import token_relevance
from components.tab import AgentTool, Tab

TAB = Tab(
    id="relevance",
    title="Relevance",
    order=1,
    build=layout.build,
    paper="MambaLRP (Jafari et al., 2024)",
    card=(
        "Which tokens and pixels does a Mamba model rely on? Relevance heatmaps that add up to the "
        "output, beside gradient baselines, with faithfulness curves."
    ),
    summary="MambaLRP: which tokens and pixels a Mamba model relies on, with baselines and faithfulness.",
    presenter_caption=layout.PRESENTER_CAPTION,
    link_runs=("explain_text", "rel_redraw_heatmap", "rel_redraw_bars", "image_example", "explain_image"),
    report_results={
        "rel-bars": "Token relevance",
        "rel-image-out": "Pixel relevance",
        "rel-curves": "Faithfulness on held-out sentences",
        "rel-long-plot": "Long-range relevance",
    },
    report_pins={"rel-pin": "rel-bars"},
    key_figure="#rel-heatmap",
    first_view_drawn=(
        "document.querySelector('#rel-heatmap .wb-token') && document.querySelector('#rel-bars .js-plotly-plot')"
    ),
    tour=TOUR,
    tools=(AgentTool(token_relevance, reads_model=True, intervention=True, cost="about a second per method"),),
    gpu_seconds=120,
)
