"""A Vision-Mamba-style classifier: patch embedding → transformers.MambaModel(inputs_embeds=…) → head.

Patches are embedded by a bias-free linear map (a stride-p convolution), a learned position
embedding is added, a learned class token is appended at the end (Mamba is causal, so the last
position has read every patch), and a bias-free linear head reads the class token. Saved as
config.json + model.safetensors and loaded with `VisionMamba.from_pretrained(folder)`, the same
call the preset loader makes for transformers classes.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


class VisionMamba(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        self.config = dict(config)
        c = self.config
        self.image_size = int(c["image_size"])
        self.patch_size = int(c["patch_size"])
        self.channels = int(c.get("channels", 1))
        self.num_labels = int(c["num_labels"])
        self.grid = self.image_size // self.patch_size
        # transformers' model code costs about a second to import: the app's start (which builds no
        # model) does not pay for it, the first model built does
        from transformers import MambaConfig, MambaModel

        self.mamba_config = MambaConfig(**c["mamba"])
        h = self.mamba_config.hidden_size
        self.patch_embed = nn.Conv2d(self.channels, h, self.patch_size, stride=self.patch_size, bias=False)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.grid * self.grid, h))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, h))
        self.mamba = MambaModel(self.mamba_config)
        self.head = nn.Linear(h, self.num_labels, bias=False)
        nn.init.normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=0.02)

    # --- the two halves the explainer needs -------------------------------------------------
    def patch_tokens(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[B, C, H, W] → patch embeddings [B, P, h] (linear in the pixels, no bias)."""
        return self.patch_embed(pixel_values).flatten(2).transpose(1, 2)

    def embed(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.patch_tokens(pixel_values.to(self.pos_embed.device)) + self.pos_embed
        return torch.cat([x, self.cls_token.expand(x.shape[0], -1, -1)], dim=1)

    def forward(self, pixel_values: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None):
        if inputs_embeds is None:
            assert pixel_values is not None, "pixel_values or inputs_embeds"
            inputs_embeds = self.embed(pixel_values)
        h = self.mamba(inputs_embeds=inputs_embeds, use_cache=False).last_hidden_state
        return self.head(h[:, -1])

    # --- persistence ----------------------------------------------------------------------------
    def save_pretrained(self, folder) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        cfg = dict(self.config, architectures=["VisionMamba"], model_type="workbench-vision-mamba")
        (folder / CONFIG_NAME).write_text(json.dumps(cfg, indent=2, sort_keys=True))
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(folder / WEIGHTS_NAME))

    @classmethod
    def from_pretrained(cls, folder, *, use_safetensors: bool = True, **kwargs) -> "VisionMamba":
        folder = Path(folder)
        if not use_safetensors:
            raise ValueError("VisionMamba loads safetensors only")
        if not (folder / CONFIG_NAME).is_file() or not (folder / WEIGHTS_NAME).is_file():
            raise FileNotFoundError(f"{folder} has no {CONFIG_NAME} + {WEIGHTS_NAME}")
        cfg = json.loads((folder / CONFIG_NAME).read_text())
        cfg.pop("architectures", None)
        cfg.pop("model_type", None)
        model = cls(cfg)
        missing, unexpected = model.load_state_dict(load_file(str(folder / WEIGHTS_NAME)), strict=False)
        if missing or unexpected:
            raise ValueError(f"weights do not match the config: missing {missing}, unexpected {unexpected}")
        dtype = kwargs.get("dtype") or kwargs.get("torch_dtype")
        if dtype is not None and dtype != "auto":
            model = model.to(dtype)
        return model.eval()
