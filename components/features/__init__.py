"""Features: sparse-autoencoder features of a LLaVA-style model (multimodal SAEs, Zhang et al., 2024)."""

from backend.core import bounds

from components.features import layout
from components.features.tour import TOUR
from components.features.tools import contrast_features, find_features, open_feature, steer_feature
from components.tab import AgentTool, Tab

TAB = Tab(
    id="features",
    title="Features",
    order=2,
    build=layout.build,
    paper="Multimodal SAEs (Zhang et al., 2024)",
    card=(
        "Sparse-autoencoder features of a LLaVA-style model: the images that light them up, where, "
        "and what happens to the caption when one is clamped."
    ),
    summary="SAE features of a LLaVA-style model: top images, activation regions, concept labels, steering.",
    link_runs=("features_load", "features_list", "analyse_image", "steer", "steer_many", "features_contrast"),
    link_params=("feature",),  # read by the tab's first view, not a linked input
    report_results={
        "features-hist": "Feature page",
        "features-firing": "Features firing on an image",
        "features-steer-out": "Steering a feature",
        "features-steer-many-out": "Steering several features at once",
        "features-contrast-plot": "Features that tell two image sets apart",
    },
    report_pins={"features-pin": "features-steer-out"},
    key_figure="#features-overlay",
    # a model and SAE without an index (hub mode before a build) open on the instructions to build one
    first_view_drawn=(
        "[...document.querySelectorAll('#features-overlay img')].some(i => i.complete && i.naturalWidth)"
        " || document.querySelector('#features-noindex')"
    ),
    tour=TOUR,
    tools=(
        AgentTool(
            find_features,
            reads_model=False,
            intervention=False,
            cost="milliseconds (reads the feature index)",
            ranges={"limit": bounds.FEAT_LIMIT},
        ),
        AgentTool(
            open_feature, reads_model=False, intervention=False, cost="well under a second (reads the feature index)"
        ),
        AgentTool(
            steer_feature,
            reads_model=True,
            intervention=True,
            cost="two greedy captions, about a second; with more clamps one more per clamp",
            ranges={
                "more_clamps": bounds.Items(bounds.STEER_CLAMPS, counted=1),
                "suppress": bounds.Items(bounds.STEER_SUPPRESS),
            },
        ),
        AgentTool(
            contrast_features,
            reads_model=True,
            intervention=False,
            cost="one prompt pass per image: about a second for 2 × 64 zoo scenes",
            ranges={
                "n": bounds.CONTRAST_IMAGES,
                "rows": bounds.CONTRAST_ROWS,
                "images_a_base64": bounds.Items(bounds.CONTRAST_IMAGES),
                "images_b_base64": bounds.Items(bounds.CONTRAST_IMAGES),
            },
        ),
    ),
    gpu_seconds=120,
)
