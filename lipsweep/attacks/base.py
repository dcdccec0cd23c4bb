"""The attack base class: input checks, eval mode, frozen parameters, attack precision.

An :class:`Attack` is called like torchattacks' (``adv = attack(x, y)``): ``__call__`` checks
the inputs, puts the model in eval mode with its parameters frozen (``requires_grad=False``),
runs :meth:`Attack.forward` and restores every module's previous ``training`` flag and every
parameter's ``requires_grad`` flag afterwards, also when the attack raises.

Freezing the parameters matters for speed and for side effects: the attacks take gradients
with ``torch.autograd.grad`` with respect to the input only, and with frozen parameters the
forward pass stores no activations for weight gradients, and attacks that call
``.backward()`` (AutoAttack's FAB) cannot accumulate into ``param.grad``.

All attacks are L-infinity on pixels in [0, 1] (docs/science.md §1.6); the model maps [0, 1] pixels
to logits (:class:`lipsweep.vit.models.PixelModel`).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import nn

from lipsweep.attacks._registry import ATTACKS, PRECISIONS
from lipsweep.vit.models import frozen_eval
from lipsweep.vit.precision import bf16_autocast

attack_mode = frozen_eval
"""Eval mode and frozen parameters inside the block (:func:`lipsweep.vit.models.frozen_eval`)."""


def check_eps(eps: float, name: str = "eps") -> float:
    """Validate an L-infinity radius in pixel units: a finite number in [0, 1]."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps):
        raise ValueError(
            f"{name} must be a number in [0, 1] (pixel units, e.g. 4/255), got {eps!r}"
        )
    if eps < 0:
        raise ValueError(f"{name} must be >= 0, got {eps!r}")
    if eps > 1:
        raise ValueError(
            f"{name} must be <= 1 (pixels are in [0, 1]; did you mean {eps}/255?), got {eps!r}"
        )
    return float(eps)


def check_images(x: torch.Tensor, y: torch.Tensor) -> None:
    """Validate a batch: x (B, C, H, W) floating point in [0, 1], y (B,) integer labels.

    One host sync (``aminmax``), outside any attack loop.
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 4 or not x.is_floating_point():
        raise ValueError(
            f"x must be a float tensor (B, C, H, W), got "
            f"{type(x).__name__} {tuple(getattr(x, 'shape', ()))}"
        )
    if (
        not isinstance(y, torch.Tensor)
        or y.dim() != 1
        or y.is_floating_point()
        or y.shape[0] != x.shape[0]
    ):
        raise ValueError(
            f"y must be an integer label tensor of shape ({x.shape[0]},), got "
            f"{tuple(getattr(y, 'shape', ()))}"
        )
    if x.numel() == 0:
        return
    lo, hi = torch.aminmax(x.detach())
    lo, hi = float(lo), float(hi)
    if not (lo >= 0.0 and hi <= 1.0):  # also catches NaN
        raise ValueError(
            f"x must hold pixels in [0, 1] (normalisation belongs inside the "
            f"model), got values in [{lo:.4g}, {hi:.4g}]"
        )


def logits_fn(model: nn.Module, precision: str = "fp32"):
    """``x -> logits`` in fp32, with the forward pass under bf16 autocast if asked."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "fp32":
        return model

    def forward(x: torch.Tensor) -> torch.Tensor:
        with bf16_autocast(x.device.type):
            out = model(x)
        return out.float()

    return forward


class Attack:
    """Base class: an L-infinity attack on a [0, 1]-pixel classifier.

    Args:
        model: maps (B, C, H, W) pixels in [0, 1] to (B, num_classes) logits.
        eps: L-infinity radius in pixel units, in [0, 1] (e.g. ``2/255``).
        settings: the attack's own settings dataclass (its spec's ``settings``, validated
            there; its defaults if None), e.g. ``PgdSettings(pgd_steps=10)``.
        precision: 'fp32' or 'bf16' (autocast for the attack's own forward/backward passes;
            the images themselves stay fp32).
        seed: the seed of its random draws (None: torch's global RNG), the suite's
            ``attack_seed``.
        batch_size: images per batch where the attack batches itself, the suite's
            ``attack_batch_size``.

    Subclasses implement :meth:`forward`; call the attack, not ``forward``.
    """

    name: str = ""
    metric_prefix: str = ""
    """Metric name stem: ``acc_<metric_prefix>_<eps*255>`` (docs/contract.md)."""
    eps_field: str = ""
    """The :class:`RobustnessConfig` field that lists this attack's eps numerators."""

    def __init__(
        self,
        model: nn.Module,
        eps: float,
        settings: Any = None,
        *,
        precision: str = "fp32",
        seed: Optional[int] = None,
        batch_size: int = 256,
    ) -> None:
        cls = ATTACKS.entry(self.name).settings if self.name in ATTACKS else None
        if settings is None and cls is not None:
            settings = cls()
        if cls is not None and not isinstance(settings, cls):
            raise TypeError(
                f"{type(self).__name__} takes its {cls.__name__}, got {type(settings).__name__}"
            )
        self.settings, self.seed, self.batch_size = settings, seed, batch_size
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.eps = check_eps(eps)
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self.precision = precision
        self.logits = logits_fn(model, precision)

    @classmethod
    def from_config(cls, model: nn.Module, eps: float, suite: Any) -> "Attack":
        """Build from a :class:`~lipsweep.attacks.config.RobustnessConfig`: the attack's own
        settings (``suite.settings[name]``) and the suite's precision, seed and batch size."""
        return cls(
            model,
            eps,
            suite.settings.get(cls.name),
            precision=suite.attack_precision,
            seed=suite.attack_seed,
            batch_size=suite.attack_batch_size,
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        check_images(x, y)
        with attack_mode(self.model):
            adv = self.forward(x.detach(), y.detach())
        return adv.detach()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(eps={self.eps:.6g}, precision={self.precision!r})"
