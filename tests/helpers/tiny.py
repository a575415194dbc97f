"""Tiny random models of the real classes, built from configs with fixed seeds (diffusers'
get_dummy_components style): one place for the Llama, Mamba, SD UNet and SD pipeline the unit tests
use. Keyword arguments override the config, so a test names only what it needs to differ.

LLaVA(-NeXT) stand-ins come with a real processor, tokenizer and chat template and are saved as the
hub saves them: tests/helpers/standins/features.py builds those."""

from __future__ import annotations

import torch
from torch import nn


def tiny_llama(seed: int = 0, vocab: int = 64, hidden: int = 32, layers: int = 2, **config):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        **{
            "vocab_size": vocab,
            "hidden_size": hidden,
            "intermediate_size": 2 * hidden,
            "num_hidden_layers": layers,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 64,
            **config,
        }
    )
    return LlamaForCausalLM(cfg).eval()


def tiny_mamba(seed: int = 0, vocab: int = 40, hidden: int = 16, layers: int = 2, state: int = 4, **config):
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(seed)
    cfg = MambaConfig(
        **{
            "vocab_size": vocab,
            "hidden_size": hidden,
            "state_size": state,
            "num_hidden_layers": layers,
            "expand": 2,
            "conv_kernel": 3,
            "use_conv_bias": False,
            **config,
        }
    )
    return MambaForCausalLM(cfg).eval()


def tiny_unet(seed: int = 0, **config):
    """An SD-style UNet2DConditionModel: one cross-attention block down and one up, 8×8 latents."""
    from diffusers import UNet2DConditionModel

    torch.manual_seed(seed)
    return UNet2DConditionModel(
        **{
            "sample_size": 8,
            "in_channels": 4,
            "out_channels": 4,
            "layers_per_block": 1,
            "block_out_channels": (8, 16),
            "norm_num_groups": 4,
            "cross_attention_dim": 12,
            "attention_head_dim": 2,
            "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
            "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"),
            **config,
        }
    ).eval()


def tiny_sd_pipe(seed: int = 0):
    """A StableDiffusionPipeline of the zoo memorization recipe's shapes (CLIP text encoder, VAE, UNet,
    DDIM), random weights: what NeMo's statistics, search and interventions run on."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel

    from backend.zoo.recipes import memorization as rec

    tok = rec.make_tokenizer()
    torch.manual_seed(seed)
    te = CLIPTextModel(rec.text_config(len(tok), tok.eos_token_id, tok.bos_token_id)).eval()
    vae = AutoencoderKL(**rec.vae_config()).eval()
    unet = UNet2DConditionModel(**rec.unet_config()).eval()
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=te,
        tokenizer=tok,
        unet=unet,
        scheduler=DDIMScheduler(**rec.scheduler_config()),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


class TinyMLP(nn.Module):
    def __init__(self, seed: int = 0, width: int = 16):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1 = nn.Linear(8, width)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(width, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))
