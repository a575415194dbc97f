"""One look for every figure: a diverging, colour-blind-safe map for signed values (red = positive,
blue = negative, white = zero) and a sequential map for non-negative activations.

Matplotlib names and the equivalent plotly colorscales, so matplotlib PNGs and plotly figures agree:

    from backend.core.colors import SIGNED_CMAP, ACTIVATION_CMAP, signed_limits
    ax.imshow(r, cmap=SIGNED_CMAP, vmin=-m, vmax=m)          # m = signed_limits(r)
    go.Heatmap(z=r, colorscale=SIGNED_PLOTLY, zmid=0)

RdBu (ColorBrewer) stays readable for the common colour-vision deficiencies; reversed so that red
means "pushes the output up". viridis is perceptually uniform and colour-blind safe.

Categorical colours (methods, layers, families) come from one qualitative palette, QUALITATIVE
(Okabe–Ito, with grey instead of black so it reads on a dark page too).

Every plotly figure goes through `themed(fig)`: the shared "workbench" template (transparent
backgrounds, mid-grey grid, the qualitative colorway, system fonts). On a dark page the app's CSS
(components.common) turns the figure's text light, so one figure reads in both themes. Importing
this module also makes "workbench" (plotly's own template with the workbench's merged on top) plotly's
default template, so a figure built elsewhere starts from the same look.
"""

from __future__ import annotations

import numpy as np

SIGNED_CMAP = "RdBu_r"  # matplotlib: red = positive, blue = negative
ACTIVATION_CMAP = "viridis"  # matplotlib: sequential, for values >= 0
SIGNED_PLOTLY = "RdBu_r"  # plotly names accept the `_r` suffix as well
ACTIVATION_PLOTLY = "Viridis"

# Two categorical colours for "method A vs method B" lines (Okabe–Ito orange / blue) and a neutral.
PAIR = ("#E69F00", "#0072B2")
NEUTRAL = "#7f7f7f"
# One colour per adapter method wherever it is drawn (Adapters tab, guided tour, exports).
PISSA, LORA = PAIR
POSITIVE = "#b2182b"  # the RdBu_r end colours, for bars of signed values
NEGATIVE = "#2166ac"

# Adapter methods by name, for code that looks a method up (the guided tour, exports): PiSSA orange,
# LoRA blue, the same pair as PISSA / LORA. The Adapters tab and the tour both draw from here.
METHOD_COLORS = {"pissa": PAIR[0], "lora": PAIR[1]}


# Okabe & Ito (2008) colour-blind-safe qualitative palette; black replaced by grey (dark pages).
QUALITATIVE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#999999", "#F0E442")

TEMPLATE_NAME = "workbench"
TRANSPARENT = "rgba(0,0,0,0)"
GRID = "rgba(128,128,128,0.25)"
AXIS_LINE = "rgba(128,128,128,0.6)"
FONT = "ui-sans-serif, system-ui, -apple-system, Segoe UI, sans-serif"
TEXT = "#374151"  # light theme text; components.common's CSS makes it light on a dark page


def qualitative(i: int) -> str:
    """The i-th categorical colour (wraps around)."""
    return QUALITATIVE[int(i) % len(QUALITATIVE)]


def _template():
    import plotly.graph_objects as go

    axis = dict(
        gridcolor=GRID,
        zerolinecolor=AXIS_LINE,
        linecolor=AXIS_LINE,
        showline=False,
        tickcolor=AXIS_LINE,
        title=dict(standoff=8),
    )
    return go.layout.Template(
        layout=go.Layout(
            paper_bgcolor=TRANSPARENT,
            plot_bgcolor=TRANSPARENT,
            font=dict(family=FONT, color=TEXT, size=12),
            colorway=list(QUALITATIVE),
            xaxis=axis,
            yaxis=axis,
            legend=dict(bgcolor=TRANSPARENT),
            coloraxis=dict(colorbar=dict(outlinewidth=0)),
            hoverlabel=dict(font=dict(family=FONT)),
        )
    )


def register_plotly_template() -> str:
    """Register the shared template with plotly (idempotent) and make it the default; its name.

    It is plotly's own template with the workbench's on top, merged once here and registered under
    one name: plotly merges a "plotly+workbench" default again for every figure it builds and for
    every `template=` it is given (about 70 ms each), where a registered name costs a copy."""
    import plotly.io as pio

    if TEMPLATE_NAME not in pio.templates:
        pio.templates[TEMPLATE_NAME] = pio.templates.merge_templates("plotly", _template())
    if pio.templates.default != TEMPLATE_NAME:
        pio.templates.default = TEMPLATE_NAME
    return TEMPLATE_NAME


def themed(fig):
    """Apply the shared look to a plotly figure (in place) and return it: the workbench template on
    top of plotly's, transparent backgrounds, theme-neutral text. Call on every figure a tab shows."""
    register_plotly_template()
    if fig.layout.template.layout.font.color != TEXT:  # built before the default was set, or with another
        fig.update_layout(template=TEMPLATE_NAME)
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    fig.update_layout(paper_bgcolor=TRANSPARENT, plot_bgcolor=TRANSPARENT, meta={**meta, "wb_template": TEMPLATE_NAME})
    return fig


def is_themed(fig) -> bool:
    """Whether `fig` carries the shared look (what the tests check for every tab's figures)."""
    lay = fig.layout
    meta = lay.meta if isinstance(lay.meta, dict) else {}
    return (
        meta.get("wb_template") == TEMPLATE_NAME
        and lay.paper_bgcolor == TRANSPARENT
        and lay.plot_bgcolor == TRANSPARENT
        and lay.template.layout.font.color == TEXT
    )


def signed_limits(values, floor: float = 1e-12) -> float:
    """The symmetric colour limit for signed values: max |v| (so zero sits on white)."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    return float(max(np.abs(a).max() if a.size else 0.0, floor))


def signed_colors(values) -> list[str]:
    """Bar colours for signed values: POSITIVE for >= 0, NEGATIVE below."""
    return [POSITIVE if float(v) >= 0 else NEGATIVE for v in np.asarray(values, dtype=float).ravel()]


def cmap_rgb(values, cmap: str = ACTIVATION_CMAP) -> np.ndarray:
    """uint8 RGB of `values` in [0, 1] through a matplotlib colormap (the shared ones by default)."""
    import matplotlib

    v = np.clip(np.asarray(values, dtype=float), 0, 1)
    return (np.asarray(matplotlib.colormaps[cmap](v))[..., :3] * 255).round().astype(np.uint8)


def css_gradient(cmap: str, lo: float = 0.0, hi: float = 1.0, n: int = 11) -> str:
    """A CSS linear-gradient through `cmap` (for HTML colour bars that match the figures)."""
    stops = ", ".join(
        f"rgb({r},{g},{b}) {100 * i / (n - 1):.0f}%"
        for i, (r, g, b) in enumerate(cmap_rgb(np.linspace(lo, hi, n), cmap))
    )
    return f"linear-gradient(90deg, {stops})"


try:  # make the shared look plotly's default as soon as the colours are imported
    register_plotly_template()
except ImportError:  # plotly is optional for the backend
    pass

__all__ = [
    "SIGNED_CMAP",
    "ACTIVATION_CMAP",
    "SIGNED_PLOTLY",
    "ACTIVATION_PLOTLY",
    "PAIR",
    "NEUTRAL",
    "PISSA",
    "LORA",
    "METHOD_COLORS",
    "POSITIVE",
    "NEGATIVE",
    "QUALITATIVE",
    "TEMPLATE_NAME",
    "qualitative",
    "themed",
    "is_themed",
    "register_plotly_template",
    "signed_limits",
    "signed_colors",
    "cmap_rgb",
    "css_gradient",
]
