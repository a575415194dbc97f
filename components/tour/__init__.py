"""Guided tour: each paper's main finding, step by step, computed live on the zoo models."""

from components.tour import layout
from components.tab import Tab

TAB = Tab(
    id="tour",
    title="Guided tour",
    order=6,
    build=layout.build,
    summary="Each paper's main finding, step by step, computed live on the zoo models.",
    gpu_seconds=180,
    key_figure="#tour-figure",
    first_view_drawn="document.querySelector('#tour-figure .js-plotly-plot')",
    link_runs=("tour_link",),  # a link's step, drawn once its tour and step are restored
)
