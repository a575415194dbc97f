"""What a tab declares about itself, once, in its package's `__init__.py`.

Every place that lists the tabs reads these: the app builds them in `order`, the Overview draws a
card for each with a `card`, the header counts the papers, the guard gives each tab's handlers its
ZeroGPU seconds, deep links rerun `link_runs`, the report keeps `report_results`, the Guided tour
runs each `tour`, and the MCP server serves each tab's `tools`. A tab's handlers are told apart by
their package (`components.<id>.…`), so a panel module of a tab belongs to it wherever it sits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from backend.core.presets import ZOO_ROOT


@dataclass
class Step:
    """One screen of a guided tour: `compute()` runs the paper's backend on the zoo model and
    returns (plotly figure, caption html, numbers). Figures go through the shared theme
    (backend.core.colors.themed: transparent), so one figure serves the light and the dark page."""

    title: str
    compute: Callable[[], tuple[object, str, dict]]


@dataclass
class Tour:
    """A paper's guided tour (a tab's `tour`, beside it in components/<tab>/tour.py); the Guided
    tour tab (components.tour) runs them."""

    tour_id: str
    title: str
    organism: str | tuple[str, ...]
    steps: list[Step]

    def available(self) -> bool:
        names = (self.organism,) if isinstance(self.organism, str) else self.organism
        return all((ZOO_ROOT / name / "manifest.json").exists() for name in names)


@dataclass(frozen=True)
class AgentTool:
    """A tab's method as an MCP tool (components.agents): a function with typed parameters whose
    docstring an agent acts on."""

    fn: Callable[..., Any]
    reads_model: bool  # False: reads an index or a list only, never waits behind a model call
    intervention: bool  # changes the model inside the call (always undone before the answer)
    cost: str  # the typical cost on the zoo, in words
    ranges: Mapping[str, Any] = field(default_factory=dict)  # cost arguments → their bound (backend.core.bounds)

    @property
    def name(self) -> str:
        return self.fn.__name__


@dataclass(frozen=True)
class Tab:
    id: str  # also the package's name under components/, the ?tab= of links, the report's section key
    title: str
    order: int
    build: Callable[..., None]  # build(ctx: components.common.TabContext): the tab's layout and events
    paper: str = ""  # the paper it puts to work: "MambaLRP (Jafari et al., 2024)"
    card: str = ""  # what it answers, for the Overview's card; a tab without one has no card
    summary: str = ""  # one line: the method and what the tab does with it (the report's fallback text)
    explain: str = ""  # one paragraph for the report's section (plain text or HTML)
    presenter_caption: str = ""  # the line shown in presenter view above the key figure
    # Deep links (components.links): the api_names of the events a link reruns after restoring the
    # inputs, in order; and the query keys the tab reads itself (not a linked input)
    link_runs: tuple[str, ...] = ()
    link_params: tuple[str, ...] = ()
    # The report (components.report): elem_id of a result's key output → its heading; a pin
    # button's elem_id → the result it pins; a note that replaces the caption in the report
    report_results: Mapping[str, str] = field(default_factory=dict)
    report_pins: Mapping[str, str] = field(default_factory=dict)
    report_note: str = ""
    # What a presenter shows first: the key figure's CSS selector (presenter view keeps it whole on the
    # first screen); and a JavaScript expression true once the tab's first view is drawn, which the
    # browser tests and benchmarks/first_views.py wait on
    key_figure: str = ""
    first_view_drawn: str = ""
    tour: Tour | None = None  # the paper's guided tour (components.tour)
    tools: tuple[AgentTool, ...] = ()
    # ZeroGPU seconds asked for by each model-touching handler of the tab (components.serving.guard):
    # an upper bound with a wide margin, since ZeroGPU stops a handler that runs longer. On an H100
    # (docs/benchmarks.md) one MambaLRP explanation of mamba-1.4b takes 0.17 s, a NeMo localisation
    # of one SD-1.4 prompt 4.3 s, MathNeuro's identification 1.4 s per 200 samples of a 1B model;
    # tabs that run whole tables or races ask for backend.core.zerogpu.MAX_DURATION.
    gpu_seconds: int = 120
