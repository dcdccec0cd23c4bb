"""ViT builder over timm, with input normalisation inside the model.

Every model lipsweep trains, attacks or measures maps pixels in [0, 1] to logits: attacks
(docs/science.md §1.6) and Lipschitz estimates (docs/science.md §1.5) are defined in pixel space, so
the mean/std normalisation of the pretrained checkpoint lives in :class:`PixelModel`, not in
the data pipeline.

The builder is one code path for ViT-B/16 and for tiny ViTs: ``timm.create_model`` with the
paper's overrides (``img_size``, ``patch_size``, ``qkv_bias=False``; paper Sec. 5) and optional
size overrides (``depth``, ``embed_dim``, ``num_heads``). Pretrained weights come from the hub
(``pretrained="hub"``) or a local file (``pretrained="/path/to/file"``); the checkpoint tag rides
on the name (``vit_base_patch16_224.orig_in21k_ft_in1k``, the original ViT-B/16). The 16x16 patch
kernel is brought to the new patch size by timm's resampling (``patch_resample="timm"``:
PI-resize kernel, bicubic position embedding) or as Hu et al. 2024 do (``"sum_pool"``: each new
kernel entry is the sum of its 4x4 block of the source one, the position grid resized bilinearly;
Hu et al.'s code, ``model_for_cifar_sn/vit.py``). The pixel normalisation is the checkpoint's
(``normalization="pretrained"``) or the CIFAR mean/std (``"cifar10"``, ``"cifar100"``).

Example::

    >>> net = create_model(ModelConfig(model="vit_tiny_patch16_224", depth=2, num_classes=10))
    >>> net(torch.rand(4, 3, 32, 32)).shape
    torch.Size([4, 10])
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

import torch
from torch import nn

from lipsweep.core.config_base import ConfigError
from lipsweep.vit.config import (  # noqa: F401  (re-exported)
    MAX_BLOCK_PARAMS,
    MAX_CLASSES,
    MAX_DEPTH,
    MAX_EMBED_DIM,
    MAX_HEADS,
    MAX_IMG_SIZE,
    MAX_TOKENS,
    PATCH_RESAMPLE,
    ModelConfig,
    check_weights_file,
    list_vit_models,
    normalizations,
    verify_weights_sha256,
)

_log = logging.getLogger(__name__)

_DEFAULT_MEAN = (0.5, 0.5, 0.5)
_DEFAULT_STD = (0.5, 0.5, 0.5)


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
    fixed = normalizations()[cfg.normalization]
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


def _timm_net(cfg: ModelConfig, pretrained: bool, **kwargs) -> nn.Module:
    import timm

    if not pretrained:
        return timm.create_model(cfg.model, pretrained=False, **kwargs)
    if cfg.pretrained == "hub":
        return timm.create_model(cfg.model, pretrained=True, **kwargs)
    if cfg.pretrained_sha256:
        verify_weights_sha256(cfg.pretrained, cfg.pretrained_sha256)
    _log.info("loading pretrained weights from %s", cfg.pretrained)
    return timm.create_model(
        cfg.model, pretrained=True, pretrained_cfg_overlay=dict(file=str(cfg.pretrained)), **kwargs
    )


def _sum_pool_net(cfg: ModelConfig, kwargs: dict) -> nn.Module:
    """Load the checkpoint at its own patch/image size, then sum-pool the kernel and resize the
    position grid into a freshly built model of ``cfg``'s size (Hu et al.'s recipe)."""
    from timm.layers import resample_abs_pos_embed

    native_kw = {k: v for k, v in kwargs.items() if k not in ("img_size", "patch_size")}
    native = _timm_net(cfg, True, **native_kw)
    net = _timm_net(cfg, False, **kwargs)
    state = native.state_dict()
    big = native.patch_embed.proj.weight.shape[-1]
    if big % cfg.patch_size:
        raise ConfigError(
            "patch_resample",
            f"'sum_pool' needs patch_size to divide the "
            f"checkpoint's {big}; got {cfg.patch_size}. Use patch_resample: timm",
        )
    state["patch_embed.proj.weight"] = sum_pool_patch_kernel(
        state["patch_embed.proj.weight"], cfg.patch_size
    )
    prefix = 0 if getattr(net, "no_embed_class", False) else net.num_prefix_tokens
    grid = cfg.img_size // cfg.patch_size
    # bilinear, align_corners=False, no antialiasing: Hu et al.'s ``resize_pos_embed``
    state["pos_embed"] = resample_abs_pos_embed(
        state["pos_embed"],
        [grid, grid],
        num_prefix_tokens=prefix,
        interpolation="bilinear",
        antialias=False,
    )
    net.load_state_dict(state)
    net.pretrained_cfg = native.pretrained_cfg
    return net


def create_model(cfg: ModelConfig) -> PixelModel:
    """Build the ViT described by ``cfg`` (same code path for ViT-B and tiny ViTs)."""
    cfg.validate_name()
    kwargs = cfg.timm_kwargs()
    if cfg.pretrained and cfg.patch_resample == "sum_pool":
        net = _sum_pool_net(cfg, kwargs)
    else:
        net = _timm_net(cfg, bool(cfg.pretrained), **kwargs)
    fixed = normalizations()[cfg.normalization]
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


@contextlib.contextmanager
def frozen_eval(model: nn.Module) -> Iterator[nn.Module]:
    """Eval mode and frozen parameters inside the block, for attacks and measurements that
    differentiate with respect to the input only; each module's mode and each parameter's
    ``requires_grad`` are restored on exit (nested use is safe)."""
    modes = [(m, m.training) for m in model.modules()]
    grads = [(p, p.requires_grad) for p in model.parameters()]
    try:
        model.eval()
        for p, _ in grads:
            p.requires_grad_(False)
        yield model
    finally:
        for m, was_training in modes:
            m.training = was_training
        for p, req in grads:
            p.requires_grad_(req)
