"""FGSM (Goodfellow et al., "Explaining and Harnessing Adversarial Examples", ICLR 2015).

x_adv = clip_[0,1](x + eps * sign(grad_x CE(f(x), y))), L-infinity, one forward and one
backward pass with respect to the input only. The loss is summed over the batch (not averaged)
so that each image's gradient does not depend on what else is in the batch; the sign is the
same as with torchattacks' mean (a positive rescaling).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lipsweep.attacks._registry import register_attack
from lipsweep.attacks.base import Attack


@register_attack("fgsm")
class FGSM(Attack):
    """Fast Gradient Sign Method, L-infinity.

    Args:
        model: maps (B, C, H, W) pixels in [0, 1] to logits.
        eps: L-infinity radius in pixel units (the paper uses 2/255 and 4/255).
        settings: its :class:`~lipsweep.attacks._registry.FgsmSettings` (only the eps list,
            which the suite reads).
        precision: 'fp32' (default) or 'bf16' autocast for the forward/backward pass.

    Shape:
        - x: (B, C, H, W), values in [0, 1]; y: (B,) integer labels.
        - output: (B, C, H, W) adversarial images in [0, 1], ``|x_adv - x|_inf <= eps``.

    Example::

        >>> adv = FGSM(model, eps=4/255)(x, y)
    """

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        xg = x.clone().requires_grad_(True)
        loss = F.cross_entropy(self.logits(xg), y, reduction="sum")
        (grad,) = torch.autograd.grad(loss, xg)
        return (x + self.eps * grad.sign_()).clamp_(0.0, 1.0)


def fgsm(model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    """FGSM adversarial images in [0, 1] (docs/contract.md); see :class:`FGSM`."""
    return FGSM(model, eps)(x, y)
