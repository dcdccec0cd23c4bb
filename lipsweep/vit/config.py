"""Model settings (torch-free): what :func:`lipsweep.vit.models.create_model` builds.

Kept apart from the ``nn.Module`` code so that a trial config (and ``lipsweep sweep --dry-run``)
validates without importing torch or timm; the paper's overrides are in Sec. 5.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from lipsweep.core.config_base import (
    ConfigError,
    absolute_path,
    check_choice,
    check_max,
    check_positive,
    show,
)
from lipsweep.data._registry import dataset_stats

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

Normalization = Optional[tuple[tuple[float, ...], tuple[float, ...]]]


def normalizations() -> dict[str, Normalization]:
    """Pixel (mean, std) by ``normalization`` name: ``pretrained`` (None: the checkpoint's own,
    timm's pretrained cfg), and each dataset whose member gives its mean/std
    (:mod:`lipsweep.data._registry`: CIFAR-10 and CIFAR-100)."""
    return {"pretrained": None, **dataset_stats()}


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
    """'' for random init, 'hub' for timm's hub weights (each trial downloads them from the
    Hugging Face hub when it builds its model), or a path to a local weights file (on a
    cluster: the same path on every node, staged once by ``deploy/stage_weights.py``)."""
    pretrained_sha256: str = ""
    """The sha256 of the ``pretrained`` file, checked when a trial loads it ('' checks
    nothing); ``deploy/stage_weights.py`` prints it."""
    drop_path: float = 0.0
    """Stochastic depth rate."""
    normalization: str = "pretrained"
    """Pixel mean/std inside the model: 'pretrained' (the checkpoint's; 0.5/0.5 for ViT-B),
    or a dataset's name, 'cifar10' or 'cifar100' (its mean/std, as in Hu et al.'s code)."""
    patch_resample: str = "timm"
    """How pretrained weights meet a smaller patch: 'timm' (timm's PI-resize of the kernel,
    bicubic position embedding) or 'sum_pool' (Hu et al.: the 16x16 kernel sum-pooled to the
    new patch size, the position grid resized bilinearly)."""

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.startswith("vit_"):
            raise ConfigError(
                "model",
                f"{show(self.model)} is not a timm ViT name (vit_*); "
                "see `lipsweep models` for the list",
            )
        check_positive("img_size", self.img_size)
        check_max("img_size", self.img_size, MAX_IMG_SIZE, _BOUND_WHY["img_size"])
        check_positive("patch_size", self.patch_size)
        check_positive("num_classes", self.num_classes)
        check_max("num_classes", self.num_classes, MAX_CLASSES, _BOUND_WHY["num_classes"])
        if self.img_size % self.patch_size:
            raise ConfigError(
                "patch_size", f"{self.patch_size} does not divide img_size {self.img_size}"
            )
        if self.num_tokens > MAX_TOKENS:
            raise ConfigError(
                "patch_size",
                f"{self.img_size // self.patch_size}^2 patches + "
                f"CLS = {self.num_tokens:,} tokens exceeds {MAX_TOKENS:,} "
                "(attention memory grows with the square of the tokens)",
            )
        limits = {"depth": MAX_DEPTH, "embed_dim": MAX_EMBED_DIM, "num_heads": MAX_HEADS}
        for name in ("depth", "embed_dim", "num_heads"):
            if getattr(self, name) is not None:
                check_positive(name, getattr(self, name))
                check_max(name, getattr(self, name), limits[name], _BOUND_WHY[name])
        if (
            self.depth is not None
            and self.embed_dim is not None
            and 12 * self.depth * self.embed_dim**2 > MAX_BLOCK_PARAMS
        ):
            raise ConfigError(
                "embed_dim",
                f"depth {self.depth} x embed_dim {self.embed_dim} "
                f"makes about {12 * self.depth * self.embed_dim**2:.2g} "
                f"parameters, more than {MAX_BLOCK_PARAMS:.0g} (about 3x timm's "
                "largest ViT; 32 GB of fp32 weights)",
            )
        if (
            self.embed_dim is not None
            and self.num_heads is not None
            and self.embed_dim % self.num_heads
        ):
            raise ConfigError(
                "num_heads", f"{self.num_heads} does not divide embed_dim {self.embed_dim}"
            )
        if not 0.0 <= self.drop_path < 1.0:
            raise ConfigError("drop_path", f"must be in [0, 1), got {self.drop_path}")
        check_choice("normalization", self.normalization, tuple(normalizations()))
        check_choice("patch_resample", self.patch_resample, PATCH_RESAMPLE)
        if self.pretrained not in ("", "hub"):  # absolute: Tune workers run elsewhere
            self.pretrained = absolute_path("pretrained", self.pretrained)
            if not Path(self.pretrained).is_file():
                raise ConfigError(
                    "pretrained",
                    f"no such weights file: {show(self.pretrained)}"
                    ". Use 'hub' to download from the Hugging Face hub, '' for "
                    "random init, or a path to a local .safetensors/.pth file",
                )
            check_weights_file(self.pretrained)
        if self.pretrained_sha256:
            if not re.fullmatch(r"[0-9a-f]{64}", str(self.pretrained_sha256)):
                raise ConfigError(
                    "pretrained_sha256",
                    f"must be 64 lowercase hex digits, got {show(self.pretrained_sha256)}",
                )
            if self.pretrained in ("", "hub"):
                raise ConfigError(
                    "pretrained_sha256", "checks a weights file: set pretrained to its path"
                )

    def timm_kwargs(self) -> dict[str, Any]:
        """The ``timm.create_model`` keyword arguments these settings give (besides the name)."""
        kwargs: dict[str, Any] = dict(
            img_size=self.img_size,
            patch_size=self.patch_size,
            num_classes=self.num_classes,
            qkv_bias=self.qkv_bias,
            drop_path_rate=self.drop_path,
        )
        for name in ("depth", "embed_dim", "num_heads"):
            if getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        return kwargs

    def validate_name(self) -> None:
        """Check the architecture exists in the installed timm and accepts these settings
        (built on the meta device: nothing is allocated; imports timm and torch)."""
        import timm
        import torch

        if not timm.is_model(self.model):
            close = [n for n in list_vit_models() if self.model.split("_")[1] in n][:5]
            raise ConfigError("model", f"unknown timm model {show(self.model)}; e.g. {close}")
        kwargs = self.timm_kwargs()
        try:
            with torch.device("meta"):
                timm.create_model(self.model, pretrained=False, **kwargs)
        except (AssertionError, RuntimeError, ValueError, TypeError) as exc:  # heads vs width
            field = next((n for n in ("embed_dim", "num_heads", "depth") if n in kwargs), "model")
            given = ", ".join(
                f"{n}={kwargs[n]}" for n in ("depth", "embed_dim", "num_heads") if n in kwargs
            )
            raise ConfigError(
                field,
                f"timm cannot build {self.model}{f' with {given}' if given else ''}: "
                f"{str(exc) or type(exc).__name__} (embed_dim must be a multiple of num_heads; "
                "set both when you change one)",
            ) from None

    @property
    def num_tokens(self) -> int:
        """Tokens per image: patches plus the CLS token."""
        return (self.img_size // self.patch_size) ** 2 + 1


def check_weights_file(path: str) -> None:
    """Refuse a ``pretrained`` file that timm cannot load, before anything is written: a
    ``*.safetensors`` file needs a well-formed safetensors header; any other name is read by
    timm with ``torch.load(weights_only=True)`` and must be a ``torch.save`` zip archive."""
    import zipfile

    from lipsweep.core.safetensors_header import HeaderError, read_header

    try:
        if path.endswith(".safetensors"):
            read_header(path)
            return
        with open(path, "rb") as fh:
            names = zipfile.ZipFile(fh).namelist() if zipfile.is_zipfile(fh) else []
    except HeaderError as exc:
        raise ConfigError("pretrained", f"{show(path)} is not a safetensors file ({exc})") from None
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise ConfigError("pretrained", f"cannot read {show(path)}: {exc}") from None
    if not any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
        raise ConfigError(
            "pretrained",
            f"{show(path)} is neither a .safetensors file nor a "
            "torch.save archive (.pth/.pt/.bin); convert the weights to one",
        )


def verify_weights_sha256(path: str, expected: str) -> None:
    """Refuse a ``pretrained`` file whose sha256 is not ``expected`` (a partial or stale copy
    on a node) before it is loaded."""
    from lipsweep.core.digest import file_sha256

    got = file_sha256(path)
    if got != expected:
        raise ConfigError(
            "pretrained_sha256",
            f"{show(path)} has sha256 {got}, not {expected}: stage it again "
            "(deploy/stage_weights.py)",
        )
