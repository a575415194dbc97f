"""Organism "pissa-toy": the PiSSA paper's toy model.

scikit-learn's 8×8 digits reduced by PCA (16 components, fitted on the pre-training images), a
two-hidden-layer MLP pre-trained on the odd digits only; the Adapters tab fine-tunes it on the even
digits with LoRA, PiSSA or full fine-tuning. The PCA projection is part of the model (buffers), so
`DigitsMLP.from_pretrained(folder)` is the whole organism.

Files: config.json, model.safetensors, splits.json (the train/test indices into load_digits()).
Truth it carries: before fine-tuning the model never predicts an even digit (accuracy 0 on them),
and the pre-training classes are recognised (held-out accuracy in the manifest).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..registry import recipe


@recipe(
    "pissa-toy",
    seed=0,
    model_class="backend.pissa.toy.DigitsMLP",
    description="digits → PCA(16) → MLP(128, 128) pre-trained on odd digits (PiSSA toy)",
    default_steps=300,
)
def train(out_dir: Path, *, seed: int, steps: int | None) -> dict:
    from backend.pissa.toy import FINETUNE_CLASSES, PRETRAIN_CLASSES, pretrain

    steps = 300 if steps is None else steps
    model, info = pretrain(seed=seed, steps=steps)
    model.save_pretrained(out_dir)
    (Path(out_dir) / "splits.json").write_text(
        json.dumps(
            {"pretrain_classes": list(PRETRAIN_CLASSES), "finetune_classes": list(FINETUNE_CLASSES), **info["split"]}
        )
    )
    return {"steps": steps, "metrics": info["metrics"]}
