"""The tiny LLaVA captioner of the Features organism: building it, batching scenes, captioning,
and reading the residual stream at a hookpoint.

Hookpoints are module names of the VLM (`model.language_model.layers.0`: that decoder layer's output)
or a name with the suffix `:input` (`model.language_model.layers.0:input`: the residual stream
entering the layer, i.e. the LM input embeddings for layer 0). The same names work on the hub
checkpoint (`model.language_model.layers.24`; the paper's "model.layers.24").
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import torch

from ..core.device import device_of
from ..core.interventions import model_lock
from . import scenes as S

if TYPE_CHECKING:
    import PIL.Image  # imported where it is used: the module loads without it

PROMPT_WORD = "describe"
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>", "<image>"]


def vocabulary() -> list[str]:
    return SPECIALS + [PROMPT_WORD] + list(S.WORDS)


def make_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens={"image_token": "<image>"},
        model_max_length=512,
    )


def make_processor(tokenizer, image_size: int = S.IMAGE_SIZE, patch_size: int = S.PATCH_SIZE):
    from transformers import LlavaProcessor

    try:  # the PIL backend (torchvision is not installed); same preprocessing
        from transformers import CLIPImageProcessorPil as CLIPImageProcessor
    except ImportError:  # pragma: no cover
        # the same processor on older transformers: mypy wants one class for both imports
        from transformers import CLIPImageProcessor  # type: ignore[assignment]

    ip = CLIPImageProcessor(
        do_resize=False,
        do_center_crop=False,
        do_rescale=True,
        rescale_factor=1 / 255,
        do_normalize=True,
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
        do_convert_rgb=True,
        size={"shortest_edge": image_size},
        crop_size={"height": image_size, "width": image_size},
    )
    return LlavaProcessor(
        image_processor=ip,
        tokenizer=tokenizer,
        patch_size=patch_size,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )


def make_model(
    tokenizer, *, image_size=S.IMAGE_SIZE, patch_size=S.PATCH_SIZE, hidden=64, vision_layers=3, text_layers=2, heads=4
):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    vision = CLIPVisionConfig(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=vision_layers,
        num_attention_heads=heads,
        image_size=image_size,
        patch_size=patch_size,
        projection_dim=hidden,
    )
    n_img = (image_size // patch_size) ** 2
    text = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=text_layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=n_img + 64,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    cfg = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        image_seq_length=n_img,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        projector_hidden_act="gelu",
    )
    return LlavaForConditionalGeneration(cfg)


def pixel_values(images: np.ndarray) -> torch.Tensor:
    """uint8 [B, H, W, 3] → the processor's normalisation ([-1, 1], channels first)."""
    # a float copy of our own: torch.from_numpy warns on a read-only array (a cached or memory-mapped image)
    x = torch.from_numpy(np.asarray(images).astype(np.float32)).div_(255.0)
    return ((x - 0.5) / 0.5).permute(0, 3, 1, 2).contiguous()


def n_image_tokens(model) -> int:
    v = model.config.vision_config
    return (v.image_size // v.patch_size) ** 2


def prompt_ids(tokenizer, model, batch: int = 1) -> torch.Tensor:
    ids = (
        [tokenizer.bos_token_id]
        + [model.config.image_token_index] * n_image_tokens(model)
        + [tokenizer.convert_tokens_to_ids(PROMPT_WORD)]
    )
    return torch.tensor([ids] * batch, device=device_of(model))


def image_slice(model) -> slice:
    """Positions of the image tokens in a prompt built by `prompt_ids` (after <s>)."""
    return slice(1, 1 + n_image_tokens(model))


def training_batch(tokenizer, model, specs: list[dict], images: np.ndarray):
    prompt = prompt_ids(tokenizer, model, 1)[0].tolist()
    caps = [tokenizer.convert_tokens_to_ids(S.caption(s).split()) + [tokenizer.eos_token_id] for s in specs]
    L = len(prompt) + max(len(c) for c in caps)
    ids = torch.full((len(specs), L), tokenizer.pad_token_id)
    labels = torch.full((len(specs), L), -100)
    att = torch.zeros((len(specs), L), dtype=torch.long)
    for i, c in enumerate(caps):
        n = len(prompt) + len(c)
        ids[i, :n] = torch.tensor(prompt + c)
        labels[i, len(prompt) : n] = torch.tensor(c)
        att[i, :n] = 1
    return {"input_ids": ids, "attention_mask": att, "labels": labels, "pixel_values": pixel_values(images)}


def patch_targets(specs: list[dict], patch: int = S.PATCH_SIZE) -> dict[str, torch.Tensor]:
    """Per-patch class of each concept family (0 = background) from the planted masks."""
    out: dict[str, list[np.ndarray]] = {fam: [] for fam in ("colour", "shape", "texture")}
    for spec in specs:
        _, masks = S.render(spec)
        for fam in out:
            lab: np.ndarray = np.zeros(masks[S.FAMILIES[fam][0]].shape, np.int64)
            for j, c in enumerate(S.FAMILIES[fam]):
                lab[masks[c]] = j + 1
            h = lab.shape[0] // patch
            blocks = lab.reshape(h, patch, h, patch).transpose(0, 2, 1, 3).reshape(h * h, patch * patch)
            out[fam].append(np.array([np.bincount(b, minlength=len(S.FAMILIES[fam]) + 1).argmax() for b in blocks]))
    return {k: torch.from_numpy(np.stack(v)) for k, v in out.items()}


@torch.no_grad()
def generate_captions(
    model, tokenizer, images: np.ndarray, *, max_new_tokens: int = 16, batch_size: int = 64
) -> list[str]:
    """Greedy captions for uint8 images [B, H, W, 3] (the caller holds the model's lock)."""
    out: list[str] = []
    for i in range(0, len(images), batch_size):
        imgs = images[i : i + batch_size]
        ids = prompt_ids(tokenizer, model, len(imgs))
        gen = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            pixel_values=pixel_values(imgs).to(ids.device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        for row in gen[:, ids.shape[1] :]:
            out.append(tokenizer.decode(row, skip_special_tokens=True).strip())
    return out


def _split(hookpoint: str) -> tuple[str, bool]:
    name, _, kind = hookpoint.partition(":")
    if kind not in ("", "input", "output"):
        raise ValueError(f"hookpoint suffix must be ':input' or ':output', not {kind!r}")
    return name, kind == "input"


def resolve_hookpoint(model, hookpoint: str) -> str:
    """Accept the paper's short names ("model.layers.24") on a LLaVA whose LM sits under
    model.language_model."""
    name, is_input = _split(hookpoint)
    names = dict(model.named_modules())
    for cand in (
        name,
        name.replace("model.layers.", "model.language_model.layers.", 1),
        "model.language_model." + name.removeprefix("model."),
    ):
        if cand in names:
            return cand + (":input" if is_input else "")
    raise KeyError(f"no module {name!r} in the model")


def _first(x):
    return x[0] if isinstance(x, tuple) else x


@contextmanager
def edit_residual(model, hookpoint: str, fn: Callable[[torch.Tensor], torch.Tensor | None]) -> Iterator:
    """Call `fn(hidden)` on the residual stream at a hookpoint; a returned tensor replaces it.
    Holds the model's lock; the hook is removed in `finally`."""
    name, is_input = _split(resolve_hookpoint(model, hookpoint))
    module = model.get_submodule(name)
    with model_lock(model):
        if is_input:

            def pre(_m, args, kwargs):
                h = kwargs.get("hidden_states", args[0] if args else None)
                new = fn(h)
                if new is None:
                    return None
                if "hidden_states" in kwargs:
                    kwargs = {**kwargs, "hidden_states": new}
                    return args, kwargs
                return (new,) + tuple(args[1:]), kwargs

            handle = module.register_forward_pre_hook(pre, with_kwargs=True)
        else:

            def post(_m, _inp, out):
                new = fn(_first(out))
                if new is None:
                    return None
                return (new,) + tuple(out[1:]) if isinstance(out, tuple) else new

            handle = module.register_forward_hook(post)
        try:
            yield model
        finally:
            handle.remove()


@torch.no_grad()
def residuals(
    model, tokenizer, images: np.ndarray, hookpoint: str, *, batch_size: int = 64
) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield (offset, activations [b, T, d]) of the prompt pass at a hookpoint, batch by batch."""
    grabbed: list[torch.Tensor] = []

    def grab(h: torch.Tensor) -> None:
        grabbed.append(h.detach())

    with edit_residual(model, hookpoint, grab):
        for i in range(0, len(images), batch_size):
            imgs = images[i : i + batch_size]
            ids = prompt_ids(tokenizer, model, len(imgs))
            grabbed.clear()
            model(input_ids=ids, pixel_values=pixel_values(imgs).to(ids.device), attention_mask=torch.ones_like(ids))
            yield i, grabbed[0]


def load_scene_set(folder: Path, name: str = "heldout.json") -> list[dict]:
    return json.loads((Path(folder) / name).read_text())["scenes"]


# ---------------------------------------------------------------------------------- hub VLMs (LLaVA-NeXT)
HUB_PROMPT = "Describe the image in one sentence."


class _Reached(Exception):
    """Raised by a hook at the hookpoint to skip the layers after it (their output is not needed)."""


@contextmanager
def stop_at(model, hookpoint: str, grabbed: list):
    """Record the residual at a hookpoint and end the forward pass there: reading layer 24 of a
    32-layer LM need not run layers 25-31 and the LM head. Use: `with stop_at(...): run(model)`;
    the pass leaves through `_Reached`, which this context swallows."""

    def keep(h):
        grabbed.append(h.detach())
        raise _Reached

    try:
        with edit_residual(model, hookpoint, keep):
            yield
    except _Reached:
        pass


def is_anyres(model) -> bool:
    return getattr(model.config, "image_grid_pinpoints", None) is not None


def chat_prompt(processor, text: str = HUB_PROMPT) -> str:
    """One user turn with an image, and the assistant's header: the checkpoint's own chat template."""
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    return processor.apply_chat_template(msgs, add_generation_prompt=True)


def as_rgb(image) -> PIL.Image.Image:
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    arr = np.asarray(image)
    if arr.ndim == 2:
        arr = np.stack([arr] * 3, -1)
    return Image.fromarray(arr[..., :3].astype(np.uint8)).convert("RGB")


def hub_inputs(model, processor, images, text: str = HUB_PROMPT) -> dict:
    """The processor's inputs for a batch of images (any sizes) with one prompt each, on the model's
    device: input_ids, attention_mask, pixel_values and, for LLaVA-NeXT, image_sizes (anyres)."""
    prompt = chat_prompt(processor, text)
    imgs = [as_rgb(im) for im in images]
    kw = {}
    if len(imgs) > 1:  # images of different sizes have different token counts
        tok = processor.tokenizer
        if tok.pad_token is None:  # Llama-3 has none; padding sits after the causal prefix, never read
            tok.pad_token = tok.eos_token
        # on the right: each row keeps the positions it has alone, so its residuals do not depend
        # on the batch it came in
        kw = {"padding": True, "padding_side": "right"}
    inputs = processor(images=imgs, text=[prompt] * len(imgs), return_tensors="pt", **kw)
    dev = device_of(model)
    dtype = next(model.parameters()).dtype
    return {k: (v.to(dev, dtype) if k == "pixel_values" else v.to(dev)) for k, v in inputs.items()}


@dataclass
class ImageLayout:
    """Where one image sits in a prompt, as sequence positions.

    LLaVA (plain): every image token is a patch of the single crop: `base` holds them all.
    LLaVA-NeXT (anyres): the image tokens are, in this order, (1) the base image, the whole picture
    resized to the vision tower's square input, `grid` × `grid` patches row by row; (2) the
    high-resolution tiles stitched into one grid over the picture and cropped to its aspect ratio
    (`tile_shape` rows × columns, row by row), each row followed by (3) one learned newline token.
    The base image comes first, so under causal attention its residuals never see the tiles."""

    base: torch.Tensor
    grid: int
    tiles: torch.Tensor
    tile_shape: tuple[int, int]
    newlines: torch.Tensor
    image: torch.Tensor  # every image-token position (base, tiles and newlines)

    @property
    def patches(self) -> torch.Tensor:
        """The image positions whose codes make patch maps: base and tiles, newlines left out."""
        return torch.cat([self.base, self.tiles])


def image_layout(model, input_ids: torch.Tensor, image_size_hw=None) -> ImageLayout:
    """The layout of one row of input_ids (see `ImageLayout`); `image_size_hw` is the original
    (height, width) the processor reported in `image_sizes` (needed for anyres)."""
    pos = (input_ids == model.config.image_token_index).nonzero().flatten().cpu()
    v = model.config.vision_config
    g = v.image_size // v.patch_size
    empty = pos[:0]
    if not is_anyres(model) or image_size_hw is None or len(pos) == g * g:
        return ImageLayout(pos[: g * g], g, empty, (0, 0), empty, pos)
    from transformers.models.llava_next.modeling_llava_next import get_anyres_image_grid_shape, unpad_image

    hw = [int(x) for x in (image_size_hw.tolist() if hasattr(image_size_hw, "tolist") else image_size_hw)]
    nh, nw = get_anyres_image_grid_shape(hw, model.config.image_grid_pinpoints, v.image_size)
    th, tw = unpad_image(torch.empty(0, nh * g, nw * g), hw).shape[1:]
    if len(pos) != g * g + th * (tw + 1):
        raise ValueError(
            f"{len(pos)} image tokens do not match a {g}×{g} base image and {th}×{tw} tiles with one newline per row"
        )
    rest = pos[g * g :].view(th, tw + 1)
    return ImageLayout(pos[: g * g], g, rest[:, :tw].reshape(-1), (int(th), int(tw)), rest[:, tw], pos)


@torch.no_grad()
def hub_residuals(
    model, processor, images, hookpoint: str, text: str = HUB_PROMPT
) -> tuple[torch.Tensor, dict, list[ImageLayout]]:
    """(activations [B, T, d] at the hookpoint, the inputs, each row's layout), the pass stopped
    right after the hookpoint. The caller holds the model's lock."""
    inputs = hub_inputs(model, processor, images, text)
    grabbed: list[torch.Tensor] = []
    with stop_at(model, hookpoint, grabbed):
        model(**inputs, use_cache=False)
    sizes = inputs.get("image_sizes")
    layouts = [
        image_layout(model, inputs["input_ids"][i], None if sizes is None else sizes[i]) for i in range(len(images))
    ]
    return grabbed[0], inputs, layouts


@torch.no_grad()
def hub_generate(model, processor, image, *, text: str = HUB_PROMPT, max_new_tokens: int = 24) -> str:
    """A greedy answer to the prompt about one image (the caller holds the model's lock)."""
    inputs = hub_inputs(model, processor, [image], text)
    tok = processor.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
    return tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True).strip()


@torch.no_grad()
def hub_describe(model, processor, images, text: str, *, max_new_tokens: int = 12) -> str:
    """A greedy answer to one prompt about several images at once (LLaVA-NeXT takes one <image>
    per picture in the turn); the caller holds the model's lock."""
    msgs = [{"role": "user", "content": [{"type": "image"} for _ in images] + [{"type": "text", "text": text}]}]
    prompt = processor.apply_chat_template(msgs, add_generation_prompt=True)
    inputs = processor(images=[[as_rgb(im) for im in images]], text=[prompt], return_tensors="pt")
    dev = device_of(model)
    dtype = next(model.parameters()).dtype
    inputs = {k: (v.to(dev, dtype) if k == "pixel_values" else v.to(dev)) for k, v in inputs.items()}
    tok = processor.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
    return tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True).strip()


@torch.no_grad()
def hub_base_residuals(
    model, processor, images, hookpoint: str, text: str = HUB_PROMPT
) -> tuple[torch.Tensor, list[ImageLayout]]:
    """Activations [B, g*g, d] at the hookpoint over each image's base-image patches only.

    On LLaVA-NeXT the base image comes before the tiles, so under causal attention its residuals
    depend on the prompt prefix alone: the language model runs on the prefix up to the base image's
    last patch (with the image features merged in as the model merges them), not on the ~4x longer
    sequence of tiles behind it. Other VLMs take the whole prompt pass."""
    if not is_anyres(model):
        h, _, layouts = hub_residuals(model, processor, images, hookpoint, text)
        return torch.stack([h[i, lay.base.to(h.device)] for i, lay in enumerate(layouts)]), layouts
    inputs = hub_inputs(model, processor, images, text)
    ids, sizes = inputs["input_ids"], inputs["image_sizes"]
    layouts = [image_layout(model, ids[i], sizes[i]) for i in range(len(images))]
    emb = model.get_input_embeddings()(ids)
    feats = model.model.get_image_features(inputs["pixel_values"], sizes, return_dict=True).pooler_output
    feats = torch.cat(list(feats), 0).to(emb.device, emb.dtype)
    emb = emb.masked_scatter((ids == model.config.image_token_index)[..., None].expand_as(emb), feats)
    cut = max(int(lay.base[-1]) + 1 for lay in layouts)
    grabbed: list[torch.Tensor] = []
    with stop_at(model, hookpoint, grabbed):
        model.model.language_model(
            inputs_embeds=emb[:, :cut], attention_mask=inputs["attention_mask"][:, :cut], use_cache=False
        )
    h = grabbed[0]
    return torch.stack([h[i, lay.base.to(h.device)] for i, lay in enumerate(layouts)]), layouts
