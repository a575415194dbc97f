"""The PiSSA paper's toy: scikit-learn digits reduced by PCA, an MLP pre-trained on some classes
and then fine-tuned on the others.

`DigitsMLP` takes raw 8×8 digit pixels (scaled to [0, 1]); its first step is a frozen PCA
projection held as buffers, so the saved folder (config.json + model.safetensors) is the whole
organism. It loads through `DigitsMLP.from_pretrained(path, use_safetensors=True)`, the same call the
preset loader makes for transformers classes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
PRETRAIN_CLASSES = (1, 3, 5, 7, 9)  # the official toy pre-trains on odd digits ...
FINETUNE_CLASSES = (0, 2, 4, 6, 8)  # ... and fine-tunes on even ones
ADAPTER_TARGETS = ["fc1", "fc2", "head"]


class DigitsMLP(nn.Module):
    model_type = "digits-mlp"
    pca_mean: torch.Tensor  # buffers (register_buffer), which torch's types cannot see
    pca_components: torch.Tensor

    def __init__(self, pca_dim: int = 16, hidden: int = 128, n_classes: int = 10, n_pixels: int = 64):
        super().__init__()
        self.config = {
            "model_type": self.model_type,
            "pca_dim": pca_dim,
            "hidden": hidden,
            "n_classes": n_classes,
            "n_pixels": n_pixels,
        }
        self.register_buffer("pca_mean", torch.zeros(n_pixels))
        self.register_buffer("pca_components", torch.zeros(pca_dim, n_pixels))
        self.fc1 = nn.Linear(pca_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, n_classes)
        self.act = nn.ReLU()

    def features(self, pixels: torch.Tensor) -> torch.Tensor:
        return (pixels - self.pca_mean) @ self.pca_components.T

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(self.features(pixels)))
        h = self.act(self.fc2(h))
        return self.head(h)

    # --- the from_pretrained / save_pretrained pair ---------------------------------------------
    def save_pretrained(self, out_dir, **_):
        from safetensors.torch import save_file

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / CONFIG_NAME).write_text(json.dumps(self.config, indent=2))
        save_file({k: v.detach().contiguous() for k, v in self.state_dict().items()}, str(out / WEIGHTS_NAME))

    @classmethod
    def from_pretrained(cls, path, use_safetensors: bool = True, **_):
        from safetensors.torch import load_file

        path = Path(path)
        if not use_safetensors:
            raise ValueError("DigitsMLP loads safetensors only")
        cfg = json.loads((path / CONFIG_NAME).read_text())
        if cfg.get("model_type") != cls.model_type:
            raise ValueError(f"{path} does not hold a {cls.model_type} model")
        model = cls(**{k: v for k, v in cfg.items() if k != "model_type"})
        model.load_state_dict(load_file(str(path / WEIGHTS_NAME)), strict=True)
        return model.eval()


def load_digits_data():
    """(X float32 in [0, 1] of shape (1797, 64), y int64)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def split_indices(y: np.ndarray, seed: int = 0, test_frac: float = 0.25) -> dict[str, list[int]]:
    """Deterministic per-class train/test split."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in range(10):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        k = int(round(len(idx) * test_frac))
        test += idx[:k].tolist()
        train += idx[k:].tolist()
    return {"train": sorted(train), "test": sorted(test)}


def subset(x, y, idx, classes):
    idx = np.asarray(idx)
    keep = idx[np.isin(y[idx], classes)]
    return torch.from_numpy(x[keep]), torch.from_numpy(y[keep])


def fit_pca(x: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean, components) of a PCA by SVD, with a deterministic sign per component."""
    mean = x.mean(axis=0)
    _, _, vt = np.linalg.svd(x - mean, full_matrices=False)
    comps = vt[:dim]
    signs = np.sign(comps[np.arange(dim), np.abs(comps).argmax(axis=1)])
    return mean.astype(np.float32), (comps * signs[:, None]).astype(np.float32)


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((model(x).argmax(-1) == y).float().mean())


def pretrain(
    seed: int = 0, steps: int = 300, pca_dim: int = 16, hidden: int = 128, lr: float = 3e-3, batch: int = 64
) -> tuple[DigitsMLP, dict]:
    """Pre-train a DigitsMLP on the odd digits (PCA fitted on those training images only)."""
    torch.manual_seed(seed)
    x, y = load_digits_data()
    split = split_indices(y, seed=0)
    pre_idx = [i for i in split["train"] if y[i] in PRETRAIN_CLASSES]
    mean, comps = fit_pca(x[pre_idx], pca_dim)
    model = DigitsMLP(pca_dim=pca_dim, hidden=hidden)
    model.pca_mean.copy_(torch.from_numpy(mean))
    model.pca_components.copy_(torch.from_numpy(comps))
    xtr, ytr = subset(x, y, split["train"], PRETRAIN_CLASSES)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        i = torch.randint(0, len(xtr), (batch,), generator=g)
        loss = nn.functional.cross_entropy(model(xtr[i]), ytr[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    xte, yte = subset(x, y, split["test"], PRETRAIN_CLASSES)
    xft, yft = subset(x, y, split["test"], FINETUNE_CLASSES)
    metrics = {
        "pretrain_test_acc": accuracy(model, xte, yte),
        "finetune_classes_test_acc_before": accuracy(model, xft, yft),
        "final_loss": float(loss.detach()),
    }
    return model, {"split": split, "metrics": metrics}
