"""Overview: what the workbench is, which models each instrument uses, and the way into each tab."""

from components.overview import layout
from components.tab import Tab

TAB = Tab(
    id="overview",
    title="Overview",
    order=0,
    build=layout.build,
    summary="What the workbench is and what it is running on.",
    gpu_seconds=120,
    key_figure="#tab-overview .wb-card",
    first_view_drawn="document.querySelector('#tab-overview .wb-card')",
)
