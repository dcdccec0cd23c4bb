"""ViT builder over timm, with input normalisation inside the model.

Every model lipsweep trains, attacks or measures maps pixels in [0, 1] to logits: attacks
(SPEC §2.6) and Lipschitz estimates (SPEC §2.5) are defined in pixel space, so the
mean/std normalisation of the pretrained checkpoint lives in :class:`PixelModel`, not in
the data pipeline.

The builder is one code path for ViT-B/16 and for tiny ViTs: ``timm.create_model`` with the
paper's overrides (``img_size``, ``patch_size``, ``qkv_bias=False``; paper Sec. 5) and optional
size overrides (``depth``, ``embed_dim``, ``num_heads``). Pretrained weights come from the hub
(``pretrained="hub"``) or a local file (``pretrained="/path/to/file"``); timm resamples the 16x16
patch kernel to the new patch size and interpolates the position embedding to the new grid.

Example::

    >>> net = create_model(ModelConfig(model="vit_tiny_patch16_224", depth=2, num_classes=10))
    >>> net(torch.rand(4, 3, 32, 32)).shape
    torch.Size([4, 10])
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import torch
from torch import nn

from lipsweep.config_base import ConfigError, absolute_path, check_max, check_positive, show

_log = logging.getLogger(__name__)

_DEFAULT_MEAN = (0.5, 0.5, 0.5)
_DEFAULT_STD = (0.5, 0.5, 0.5)

# Upper bounds (the reason goes into the error): a typo such as embed_dim 1e9 must not reach
# an allocation. timm's largest ViTs have 48 blocks, width 3,072 and 1-3 billion parameters.
MAX_IMG_SIZE = 2048
MAX_TOKENS = 128 * 128 + 1
MAX_DEPTH = 128
MAX_EMBED_DIM = 8192
MAX_HEADS = 256
MAX_CLASSES = 100_000
MAX_BLOCK_PARAMS = 8 * 10**9
_BOUND_WHY = {
    "img_size": "tokens and memory grow with its square",
    "num_classes": "ImageNet-21k has 21,843",
    "depth": "timm's deepest ViT has 48 blocks",
    "embed_dim": "timm's widest ViT is 3,072; parameters grow with its square",
    "num_heads": "32 channels per head at the largest embed_dim, 8,192",
}


def list_vit_models() -> list[str]:
    """Names of timm's plain ViT architectures (``vision_transformer`` module)."""
    import timm

    return sorted(n for n in timm.list_models(module="vision_transformer") if n.startswith("vit_"))


@dataclass
class ModelConfig:
    """What to build: a timm ViT, resized for small images as in the paper (Sec. 5)."""

    model: str = "vit_tiny_patch16_224"
    """timm architecture name (any ``vit_*`` of timm's vision_transformer module)."""
    img_size: int = 32
    """Input resolution in pixels (square)."""
    patch_size: int = 4
    """Patch size; must divide img_size. 32px / patch 4 gives 64 patches + CLS = 65 tokens."""
    num_classes: int = 10
    """Number of output logits."""
    qkv_bias: bool = False
    """Keep biases on the q/k/v projections (the paper removes them)."""
    depth: Optional[int] = None
    """Override the number of blocks (None keeps the architecture's)."""
    embed_dim: Optional[int] = None
    """Override the token width (None keeps the architecture's)."""
    num_heads: Optional[int] = None
    """Override the number of heads (None keeps the architecture's)."""
    pretrained: str = ""
    """'' for random init, 'hub' for timm's hub weights, or a path to a local weights file."""
    drop_path: float = 0.0
    """Stochastic depth rate."""

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.startswith("vit_"):
            raise ConfigError("model", f"{show(self.model)} is not a timm ViT name (vit_*); "
                              "see `lipsweep models` for the list")
        check_positive("img_size", self.img_size)
        check_max("img_size", self.img_size, MAX_IMG_SIZE, _BOUND_WHY["img_size"])
        check_positive("patch_size", self.patch_size)
        check_positive("num_classes", self.num_classes)
        check_max("num_classes", self.num_classes, MAX_CLASSES, _BOUND_WHY["num_classes"])
        if self.img_size % self.patch_size:
            raise ConfigError("patch_size", f"{self.patch_size} does not divide img_size "
                              f"{self.img_size}")
        if self.num_tokens > MAX_TOKENS:
            raise ConfigError("patch_size", f"{self.img_size // self.patch_size}^2 patches + "
                              f"CLS = {self.num_tokens:,} tokens exceeds {MAX_TOKENS:,} "
                              "(attention memory grows with the square of the tokens)")
        limits = {"depth": MAX_DEPTH, "embed_dim": MAX_EMBED_DIM, "num_heads": MAX_HEADS}
        for name in ("depth", "embed_dim", "num_heads"):
            if getattr(self, name) is not None:
                check_positive(name, getattr(self, name))
                check_max(name, getattr(self, name), limits[name], _BOUND_WHY[name])
        if self.depth is not None and self.embed_dim is not None \
                and 12 * self.depth * self.embed_dim ** 2 > MAX_BLOCK_PARAMS:
            raise ConfigError("embed_dim", f"depth {self.depth} x embed_dim {self.embed_dim} "
                              f"makes about {12 * self.depth * self.embed_dim ** 2:.2g} "
                              f"parameters, more than {MAX_BLOCK_PARAMS:.0g} (about 3x timm's "
                              "largest ViT; 32 GB of fp32 weights)")
        if self.embed_dim is not None and self.num_heads is not None \
                and self.embed_dim % self.num_heads:
            raise ConfigError("num_heads", f"{self.num_heads} does not divide embed_dim "
                              f"{self.embed_dim}")
        if not 0.0 <= self.drop_path < 1.0:
            raise ConfigError("drop_path", f"must be in [0, 1), got {self.drop_path}")
        if self.pretrained not in ("", "hub"):  # absolute: Tune workers run elsewhere
            self.pretrained = absolute_path("pretrained", self.pretrained)
            if not Path(self.pretrained).is_file():
                raise ConfigError("pretrained", f"no such weights file: {show(self.pretrained)}"
                                  ". Use 'hub' to download from the Hugging Face hub, '' for "
                                  "random init, or a path to a local .safetensors/.pth file")
            check_weights_file(self.pretrained)

    def validate_name(self) -> None:
        """Check the architecture exists in the installed timm (imports timm)."""
        import timm

        if not timm.is_model(self.model):
            close = [n for n in list_vit_models() if self.model.split("_")[1] in n][:5]
            raise ConfigError("model", f"unknown timm model {show(self.model)}; e.g. {close}")

    @property
    def num_tokens(self) -> int:
        """Tokens per image: patches plus the CLS token."""
        return (self.img_size // self.patch_size) ** 2 + 1


def check_weights_file(path: str) -> None:
    """Refuse a ``pretrained`` file that timm cannot load, before anything is written: a
    ``*.safetensors`` file needs a well-formed safetensors header; any other name is read by
    timm with ``torch.load(weights_only=True)`` and must be a ``torch.save`` zip archive."""
    import zipfile

    from lipsweep._safetensors import HeaderError, read_header

    try:
        with open(path, "rb") as fh:
            if path.endswith(".safetensors"):
                read_header(fh, os.fstat(fh.fileno()).st_size)
                return
            names = zipfile.ZipFile(fh).namelist() if zipfile.is_zipfile(fh) else []
    except HeaderError as exc:
        raise ConfigError("pretrained", f"{show(path)} is not a safetensors file ({exc})") \
            from None
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise ConfigError("pretrained", f"cannot read {show(path)}: {exc}") from None
    if not any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
        raise ConfigError("pretrained", f"{show(path)} is neither a .safetensors file nor a "
                          "torch.save archive (.pth/.pt/.bin); convert the weights to one")


class PixelModel(nn.Module):
    """Wraps a classifier so that it maps pixels in [0, 1] to logits.

    Shape:
        - Input: (B, 3, H, W), values in [0, 1].
        - Output: (B, num_classes) logits.
    """

    def __init__(self, net: nn.Module, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        self.net = net
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.std)


def pixel_normalization(model_name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) of the architecture's default pretrained weights (0.5/0.5 if unknown)."""
    from timm.models import get_pretrained_cfg

    pcfg = get_pretrained_cfg(model_name)
    if pcfg is None:
        return _DEFAULT_MEAN, _DEFAULT_STD
    return tuple(pcfg.mean), tuple(pcfg.std)


def create_model(cfg: ModelConfig) -> PixelModel:
    """Build the ViT described by ``cfg`` (same code path for ViT-B and tiny ViTs)."""
    import timm

    cfg.validate_name()
    kwargs: dict = dict(img_size=cfg.img_size, patch_size=cfg.patch_size,
                        num_classes=cfg.num_classes, qkv_bias=cfg.qkv_bias,
                        drop_path_rate=cfg.drop_path)
    for name in ("depth", "embed_dim", "num_heads"):
        if getattr(cfg, name) is not None:
            kwargs[name] = getattr(cfg, name)
    if cfg.pretrained == "hub":
        net = timm.create_model(cfg.model, pretrained=True, **kwargs)
    elif cfg.pretrained:
        _log.info("loading pretrained weights from %s", cfg.pretrained)
        net = timm.create_model(cfg.model, pretrained=True,
                                pretrained_cfg_overlay=dict(file=str(cfg.pretrained)), **kwargs)
    else:
        net = timm.create_model(cfg.model, pretrained=False, **kwargs)
    pcfg = getattr(net, "pretrained_cfg", {}) or {}
    mean = tuple(pcfg.get("mean", _DEFAULT_MEAN))
    std = tuple(pcfg.get("std", _DEFAULT_STD))
    return PixelModel(net, mean, std)


def attention_modules(model: nn.Module) -> Iterator[nn.Module]:
    """The timm ``Attention`` modules of ``model``, in block order."""
    from timm.layers import Attention

    for m in model.modules():
        if isinstance(m, Attention):
            yield m
