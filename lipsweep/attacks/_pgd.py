"""PGD, L-infinity (Madry et al., "Towards Deep Learning Models Resistant to Adversarial
Attacks", ICLR 2018).

x_0 = x + U(-eps, eps) (random start) or x; x_{t+1} = Proj_{B_inf(x, eps) and [0,1]}(x_t +
alpha * sign(grad CE(f(x_t), y))). The paper (Sec. 5) uses 4 steps at eps 2/255 and 4/255 and
does not state alpha or the start; our defaults:

- ``step_size=None`` means alpha = 2.5 * eps / steps (Madry et al.'s rule: the iterates can
  reach the boundary of the ball and still move along it). torchattacks' default, and
  Hu et al.'s evaluation code (``robust_evaluate/pgd.py``, ``--alpha 2``), is a fixed
  alpha = 2/255, which the paper spaces use (``pgd_step_size``); pass ``step_size`` to use any
  other value (pixel units).
- ``random_start=True`` (as in Madry et al. and torchattacks).
- ``restarts=1``. With ``restarts > 1`` the result is the worst case per image: an image
  counts as robust only if every restart fails, and the first successful restart's image is
  returned for the others (one extra forward pass per restart to tell which).

Speed: gradients via ``torch.autograd.grad`` with respect to the input only (parameters are
frozen by :class:`~lipsweep.attacks.base.Attack`), the box ``[max(x-eps,0), min(x+eps,1)]`` is
computed once and the step and projection are in place; no host syncs inside the loop.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from lipsweep.attacks._registry import PgdSettings, register_attack
from lipsweep.attacks.base import Attack

DEFAULT_STEP_FACTOR = 2.5
"""alpha = DEFAULT_STEP_FACTOR * eps / steps when no step size is given."""


@register_attack("pgd")
class PGD(Attack):
    """Projected Gradient Descent on the cross-entropy, L-infinity.

    Args:
        model: maps (B, C, H, W) pixels in [0, 1] to logits.
        eps: L-infinity radius in pixel units (paper: 2/255 and 4/255).
        settings: its :class:`~lipsweep.attacks._registry.PgdSettings`: ``pgd_steps``
            gradient steps (paper: 4), ``pgd_step_size`` alpha in pixel units (None:
            2.5 * eps / steps), ``pgd_random_start`` (start from x + U(-eps, eps), clipped to
            [0, 1]) and ``pgd_restarts`` (worst case per image over them).
        seed: None draws the start from torch's global RNG on the images' device. An integer
            seeds a private CPU generator that draws each image's start in turn, so that the
            same images get the same starts however they are split into batches.
        precision: 'fp32' or 'bf16' autocast for the forward/backward passes.

    Shape:
        - x: (B, C, H, W), values in [0, 1]; y: (B,) integer labels.
        - output: (B, C, H, W) adversarial images in [0, 1], ``|x_adv - x|_inf <= eps``.

    Example::

        >>> adv = PGD(model, eps=4/255, settings=PgdSettings(pgd_steps=4))(x, y)
    """

    settings: PgdSettings

    def __init__(
        self,
        model: nn.Module,
        eps: float,
        settings: Optional[PgdSettings] = None,
        *,
        precision: str = "fp32",
        seed: Optional[int] = None,
        batch_size: int = 256,
    ) -> None:
        super().__init__(
            model, eps, settings, precision=precision, seed=seed, batch_size=batch_size
        )
        cfg = self.settings
        self.steps, self.restarts = cfg.pgd_steps, cfg.pgd_restarts
        step_size = cfg.pgd_step_size
        if step_size is None:
            step_size = DEFAULT_STEP_FACTOR * self.eps / self.steps
        self.step_size = float(step_size)
        self.random_start = cfg.pgd_random_start
        self._gen = None if seed is None else torch.Generator().manual_seed(int(seed))

    def _starts(self, x: torch.Tensor) -> torch.Tensor:
        """Uniform noise in [-eps, eps], (restarts, B, C, H, W) (drawn as torchattacks does)."""
        r, b = self.restarts, x.shape[0]
        if self._gen is None:
            return torch.empty((r, *x.shape), device=x.device, dtype=x.dtype).uniform_(
                -self.eps, self.eps
            )
        # one draw per image: the same images get the same starts however they are batched
        per_image = [
            torch.empty((r, *x.shape[1:])).uniform_(-self.eps, self.eps, generator=self._gen)
            for _ in range(b)
        ]
        u = torch.stack(per_image, dim=1) if b else torch.empty((r, *x.shape))
        return u.to(device=x.device, dtype=x.dtype)

    def _descend(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        lo: torch.Tensor,
        hi: torch.Tensor,
        delta0: Optional[torch.Tensor],
    ) -> torch.Tensor:
        adv = x.clone() if delta0 is None else torch.clamp(x + delta0, min=lo, max=hi)
        for _ in range(self.steps):
            adv.requires_grad_(True)
            loss = F.cross_entropy(self.logits(adv), y, reduction="sum")
            (grad,) = torch.autograd.grad(loss, adv)
            adv = adv.detach()
            adv.add_(grad.sign_(), alpha=self.step_size)
            adv.clamp_(min=lo, max=hi)  # projection onto the ball and [0, 1] at once
        return adv

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        lo = (x - self.eps).clamp_(min=0.0)
        hi = (x + self.eps).clamp_(max=1.0)
        if not self.random_start:
            return self._descend(x, y, lo, hi, None)
        starts = self._starts(x)
        if self.restarts == 1:
            return self._descend(x, y, lo, hi, starts[0])
        best, fooled = x.clone(), torch.zeros_like(y, dtype=torch.bool)
        for r in range(self.restarts):
            adv = self._descend(x, y, lo, hi, starts[r])
            with torch.no_grad():
                wrong = self.logits(adv).argmax(1) != y
            take = (wrong & ~fooled) if r else torch.ones_like(fooled)
            best = torch.where(take.view(-1, 1, 1, 1), adv, best)
            fooled |= wrong
        return best


def pgd(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    eps: float,
    steps: int,
    step_size: Optional[float] = None,
    random_start: bool = True,
) -> torch.Tensor:
    """PGD adversarial images in [0, 1] (docs/contract.md); see :class:`PGD` for the defaults.

    The random start draws from torch's global RNG (seed it with ``torch.manual_seed``).
    """
    settings = PgdSettings(pgd_steps=steps, pgd_step_size=step_size, pgd_random_start=random_start)
    return PGD(model, eps, settings)(x, y)
