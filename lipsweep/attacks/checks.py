"""Sanity checks run before any robustness number is reported (after AutoAttack's checks.py).

Gradient attacks give meaningless numbers on models that break their assumptions; these
checks catch the usual ways (Croce & Hein 2020; Carlini et al. 2019, "On Evaluating
Adversarial Robustness"). Each returns a list of warning strings (empty when it passes) and
logs each warning with ``logging.warning``; the driver puts them in its result under
``warnings``. What each one means:

- ``outputs-are-probabilities``: every output row lies in [0, 1] and sums to 1. The attacks
  need logits; cross-entropy on probabilities has vanishing gradients. Return logits.
- ``zero-input-gradient``: the gradient of the logit margin with respect to the input is
  exactly zero for some images (non-differentiable or saturated model, gradient masking);
  gradient attacks then cannot move and robust accuracy is overestimated.
- ``nondeterministic``: two forward passes in eval mode disagree (dropout or other
  randomness left on, or a randomized defence). Attacks and accuracy then use different
  models; use an expectation-over-transformation evaluation or switch the randomness off.
- ``perturbation-out-of-bounds``: an adversarial image is farther than eps from its clean
  image (L-infinity) or outside [0, 1]. The attack is broken; the number is invalid.
- ``non-monotone-accuracy``: a stronger attack (larger eps, PGD vs FGSM, AutoAttack vs PGD)
  leaves more accuracy than a weaker one by more than the slack (1 point, and at least one
  image): a sign of gradient masking.
"""

from __future__ import annotations

import logging
import re
from typing import Mapping

import torch
from torch import nn

from lipsweep.attacks._registry import strength_order
from lipsweep.attacks.base import attack_mode
from lipsweep.core.metric_names import ACC_CLEAN, ACC_PREFIX, attack_metric

_log = logging.getLogger(__name__)

PERTURBATION_TOL = 1e-6
"""Float slack on |x_adv - x|_inf <= eps and on [0, 1] (pixels are fp32, rounding ~6e-8)."""


def _warn(kind: str, message: str) -> list[str]:
    text = f"[{kind}] {message} (see lipsweep/attacks/checks.py; robustness numbers may be invalid)"
    _log.warning("%s", text)
    return [text]


def check_logits(logits: torch.Tensor, tol: float = 1e-5) -> list[str]:
    """Warn if the model's outputs look like probabilities rather than logits."""
    out = logits.detach().float()
    in_unit = bool((out.min() > -tol) & (out.max() < 1 + tol))
    sums_one = bool(((out.sum(-1) - 1).abs() < tol).all())
    if in_unit and sums_one:
        return _warn(
            "outputs-are-probabilities",
            "every output row is in [0, 1] and sums to "
            "1: the model seems to return probabilities; attacks need logits",
        )
    return []


def check_input_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[str]:
    """Warn if the gradient of the margin (true logit minus best other) w.r.t. x is all zero
    for some image. The margin, unlike the cross-entropy, does not saturate."""
    with attack_mode(model):
        xg = x.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            logits = model(xg).float()
            true = logits.gather(1, y.view(-1, 1)).squeeze(1)
            other = logits.scatter(1, y.view(-1, 1), float("-inf")).amax(1)
            margin = (true - other).sum()
            if not margin.requires_grad:
                return _warn(
                    "zero-input-gradient",
                    "the logits do not depend differentiably "
                    f"on the input for all {x.shape[0]} checked images",
                )
            (grad,) = torch.autograd.grad(margin, xg, allow_unused=True)
    if grad is None:
        n_zero = x.shape[0]
    else:
        n_zero = int((grad.flatten(1).abs().sum(1) == 0).sum())
    if n_zero:
        return _warn(
            "zero-input-gradient",
            f"{n_zero} of {x.shape[0]} checked images have an "
            "all-zero input gradient; gradient attacks cannot move them",
        )
    return []


def check_deterministic(model: nn.Module, x: torch.Tensor, rtol: float = 1e-4) -> list[str]:
    """Warn if two eval-mode forward passes on the same images disagree."""
    with attack_mode(model), torch.no_grad():
        a, b = model(x).float(), model(x).float()
    diff = (a - b).flatten(1).norm(dim=1) / (a.flatten(1).norm(dim=1) + 1e-12)
    if bool((diff > rtol).any()) or bool((a.argmax(1) != b.argmax(1)).any()):
        return _warn(
            "nondeterministic",
            f"two eval-mode forward passes differ (max relative "
            f"difference {float(diff.max()):.3g}): randomness is on at evaluation",
        )
    return []


def check_perturbation(
    x_adv: torch.Tensor,
    x: torch.Tensor,
    eps: float,
    attack: str = "",
    tol: float = PERTURBATION_TOL,
) -> list[str]:
    """Warn unless every ``x_adv`` is within eps of ``x`` (L-infinity) and inside [0, 1]."""
    if x.numel() == 0:
        return []
    dist = float((x_adv - x).abs().amax())
    lo, hi = torch.aminmax(x_adv)
    lo, hi = float(lo), float(hi)
    ok = dist <= eps + tol and lo >= -tol and hi <= 1 + tol
    if not ok:  # NaN fails every comparison above, so lands here too
        return _warn(
            "perturbation-out-of-bounds",
            f"{attack or 'attack'}: max |x_adv - x|_inf "
            f"= {dist:.6g} for eps = {eps:.6g}; x_adv in [{lo:.6g}, {hi:.6g}]",
        )
    return []


def run_model_checks(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[str]:
    """The model checks (logits, gradients, determinism) on one batch."""
    with attack_mode(model), torch.no_grad():
        logits = model(x)
    return check_logits(logits) + check_input_gradients(model, x, y) + check_deterministic(model, x)


_METRIC = re.compile(rf"^{ACC_PREFIX}(?P<attack>[a-z0-9]+)_(?P<eps>\d+)$")


def check_monotone(metrics: Mapping[str, float], slack: float = 1.0, images: int = 0) -> list[str]:
    """Warn where a stronger attack leaves more accuracy (percent) than a weaker one + slack:
    larger eps vs smaller eps of one attack, and FGSM >= PGD >= AutoAttack at one eps.
    Clean accuracy bounds them all. On ``images`` images the slack is at least one image
    (100 / images points): PGD's random start can miss one image that FGSM's step finds, and
    below one image the check warned on 64 images as the kernels' rounding changed the model."""
    if images > 0:
        slack = max(slack, 100.0 / images)
    acc: dict[tuple[str, int], float] = {}
    for key, value in metrics.items():
        m = _METRIC.match(key)
        if m:
            acc[(m["attack"], int(m["eps"]))] = float(value)
    pairs = []
    if ACC_CLEAN in metrics:
        pairs += [(ACC_CLEAN, attack_metric(a, e)) for a, e in acc]
    for a, e in acc:
        pairs += [
            (attack_metric(a, e), attack_metric(a, e2)) for (a2, e2) in acc if a2 == a and e2 > e
        ]
    order = strength_order()
    for weak, strong in zip(order, order[1:]):
        pairs += [
            (attack_metric(weak, e), attack_metric(strong, e))
            for (a, e) in acc
            if a == strong and (weak, e) in acc
        ]
    out: list[str] = []
    for weak, strong in pairs:
        if metrics[strong] > metrics[weak] + slack:
            out += _warn(
                "non-monotone-accuracy",
                f"{strong} = {metrics[strong]:.2f} > {weak} "
                f"= {metrics[weak]:.2f} + {slack:g}: the stronger attack is weaker "
                "(gradient masking?)",
            )
    return out
