"""ViT builder over timm, with input normalisation inside the model.

Every model lipsweep trains, attacks or measures maps pixels in [0, 1] to logits: attacks
(SPEC §2.6) and Lipschitz estimates (SPEC §2.5) are defined in pixel space, so the
mean/std normalisation of the pretrained checkpoint lives in :class:`PixelModel`, not in
the data pipeline.

The builder is one code path for ViT-B/16 and for tiny ViTs: ``timm.create_model`` with the
paper's overrides (``img_size``, ``patch_size``, ``qkv_bias=False``; paper Sec. 5) and optional
size overrides (``depth``, ``embed_dim``, ``num_heads``). Pretrained weights come from the hub
(``pretrained="hub"``) or a local file (``pretrained="/path/to/file"``); the checkpoint tag rides
on the name (``vit_base_patch16_224.orig_in21k_ft_in1k``, the original ViT-B/16). The 16x16 patch
kernel is brought to the new patch size by timm's resampling (``patch_resample="timm"``:
PI-resize kernel, bicubic position embedding) or as Hu et al. 2024 do (``"sum_pool"``: each new
kernel entry is the sum of its 4x4 block of the old one, the position grid resized bilinearly;
Hu et al.'s code, ``model_for_cifar_sn/vit.py``). The pixel normalisation is the checkpoint's
(``normalization="pretrained"``) or the CIFAR mean/std (``"cifar10"``, ``"cifar100"``).

Example::

    >>> net = create_model(ModelConfig(model="vit_tiny_patch16_224", depth=2, num_classes=10))
    >>> net(torch.rand(4, 3, 32, 32)).shape
    torch.Size([4, 10])
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn

from lipsweep.config_base import (ConfigError, absolute_path, check_choice, check_max,
                                  check_positive, show)

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

NORMALIZATIONS: dict[str, Optional[tuple[tuple[float, ...], tuple[float, ...]]]] = {
    "pretrained": None,
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2471, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
}
"""Pixel (mean, std) by name; ``pretrained`` is the checkpoint's own (timm's pretrained cfg).
The CIFAR values are Hu et al.'s (``train/utils.py`` of its public code)."""

PATCH_RESAMPLE = ("timm", "sum_pool")


def list_vit_models() -> list[str]:
    """Names of timm's plain ViT architectures (``vision_transformer`` module)."""
    import timm

    return sorted(n for n in timm.list_models(module="vision_transformer") if n.startswith("vit_"))


@dataclass
class ModelConfig:
    """What to build: a timm ViT, resized for small images as in the paper (Sec. 5)."""

    model: str = "vit_tiny_patch16_224"
    """timm architecture name (any ``vit_*`` of timm's vision_transformer module), optionally with
    a pretrained tag, e.g. ``vit_base_patch16_224.orig_in21k_ft_in1k`` (original ViT-B/16)."""
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
    normalization: str = "pretrained"
    """Pixel mean/std inside the model: 'pretrained' (the checkpoint's; 0.5/0.5 for ViT-B),
    'cifar10' or 'cifar100' (the dataset's mean/std, as in Hu et al.'s code)."""
    patch_resample: str = "timm"
    """How pretrained weights meet a smaller patch: 'timm' (timm's PI-resize of the kernel,
    bicubic position embedding) or 'sum_pool' (Hu et al.: the 16x16 kernel sum-pooled to the
    new patch size, the position grid resized bilinearly)."""

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
        check_choice("normalization", self.normalization, tuple(NORMALIZATIONS))
        check_choice("patch_resample", self.patch_resample, PATCH_RESAMPLE)
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


def model_normalization(cfg: ModelConfig) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) the model wrapper applies for ``cfg`` (what an export's config.json holds)."""
    fixed = NORMALIZATIONS[cfg.normalization]
    return fixed if fixed is not None else pixel_normalization(cfg.model)


def sum_pool_patch_kernel(weight: torch.Tensor, patch_size: int) -> torch.Tensor:
    """(O, C, P, P) patch kernel -> (O, C, p, p), each entry the sum of its (P/p)^2 block.

    A constant patch keeps its response (the kernel's total is unchanged), as in Hu et al.'s
    ``checkpoint_filter_fn`` (``model_for_cifar_sn/vit.py`` of its public code).
    """
    o, c, big, big_w = weight.shape
    if big != big_w or big % patch_size:
        raise ValueError(f"patch size {patch_size} does not divide the {big}x{big_w} kernel")
    f = big // patch_size
    return weight.reshape(o, c, patch_size, f, patch_size, f).sum(dim=(3, 5))  # (O, C, p, p)


def resize_pos_embed_bilinear(pos: torch.Tensor, grid: int, prefix: int) -> torch.Tensor:
    """(1, prefix + G*G, D) -> (1, prefix + grid*grid, D): prefix (CLS) rows kept, the G x G
    grid resized bilinearly (align_corners=False), as Hu et al.'s ``resize_pos_embed``."""
    tok, old = pos[:, :prefix], pos[:, prefix:]
    g = math.isqrt(old.shape[1])
    if g * g != old.shape[1]:
        raise ValueError(f"position embedding of {old.shape[1]} grid tokens is not square")
    old = old.reshape(1, g, g, -1).permute(0, 3, 1, 2)                          # (1, D, G, G)
    new = F.interpolate(old, size=(grid, grid), mode="bilinear", align_corners=False)
    return torch.cat([tok, new.permute(0, 2, 3, 1).reshape(1, grid * grid, -1)], dim=1)


def _timm_net(cfg: ModelConfig, pretrained: bool, **kwargs) -> nn.Module:
    import timm

    if not pretrained:
        return timm.create_model(cfg.model, pretrained=False, **kwargs)
    if cfg.pretrained == "hub":
        return timm.create_model(cfg.model, pretrained=True, **kwargs)
    _log.info("loading pretrained weights from %s", cfg.pretrained)
    return timm.create_model(cfg.model, pretrained=True,
                             pretrained_cfg_overlay=dict(file=str(cfg.pretrained)), **kwargs)


def _sum_pool_net(cfg: ModelConfig, kwargs: dict) -> nn.Module:
    """Load the checkpoint at its own patch/image size, then sum-pool the kernel and resize the
    position grid into a freshly built model of ``cfg``'s size (Hu et al.'s recipe)."""
    native_kw = {k: v for k, v in kwargs.items() if k not in ("img_size", "patch_size")}
    native = _timm_net(cfg, True, **native_kw)
    net = _timm_net(cfg, False, **kwargs)
    state = native.state_dict()
    big = native.patch_embed.proj.weight.shape[-1]
    if big % cfg.patch_size:
        raise ConfigError("patch_resample", f"'sum_pool' needs patch_size to divide the "
                          f"checkpoint's {big}; got {cfg.patch_size}. Use patch_resample: timm")
    state["patch_embed.proj.weight"] = sum_pool_patch_kernel(state["patch_embed.proj.weight"],
                                                             cfg.patch_size)
    prefix = 0 if getattr(net, "no_embed_class", False) else net.num_prefix_tokens
    state["pos_embed"] = resize_pos_embed_bilinear(state["pos_embed"], cfg.img_size //
                                                   cfg.patch_size, prefix)
    net.load_state_dict(state)
    net.pretrained_cfg = native.pretrained_cfg
    return net


def create_model(cfg: ModelConfig) -> PixelModel:
    """Build the ViT described by ``cfg`` (same code path for ViT-B and tiny ViTs)."""
    cfg.validate_name()
    kwargs: dict = dict(img_size=cfg.img_size, patch_size=cfg.patch_size,
                        num_classes=cfg.num_classes, qkv_bias=cfg.qkv_bias,
                        drop_path_rate=cfg.drop_path)
    for name in ("depth", "embed_dim", "num_heads"):
        if getattr(cfg, name) is not None:
            kwargs[name] = getattr(cfg, name)
    if cfg.pretrained and cfg.patch_resample == "sum_pool":
        net = _sum_pool_net(cfg, kwargs)
    else:
        net = _timm_net(cfg, bool(cfg.pretrained), **kwargs)
    fixed = NORMALIZATIONS[cfg.normalization]
    if fixed is not None:
        mean, std = fixed
    else:
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
