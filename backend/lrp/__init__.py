"""MambaLRP (Jafari et al., 2024) for transformers Mamba models, with baselines and faithfulness.

from backend.lrp import attribute, METHODS
R = attribute(model, input_ids, target=token_id)            # [seq_len], sums to the logit
R = attribute(model, input_ids, target=t, method="gi")      # a baseline
R = attribute(model, input_ids, target=t, rules={"norm"})   # an ablation
"""

from .forward import RULES, lm_forward
from .methods import LABELS, METHODS, SIGNED, attribute, attribute_image, attribute_text, conservation
from .vision import VisionMamba

__all__ = [
    "RULES",
    "METHODS",
    "LABELS",
    "SIGNED",
    "attribute",
    "attribute_text",
    "attribute_image",
    "conservation",
    "lm_forward",
    "VisionMamba",
]
