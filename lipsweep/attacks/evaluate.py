"""The robustness evaluation of one trained model: clean, FGSM, PGD and AutoAttack accuracy.

``evaluate_robustness`` takes the first ``attack_images`` images of the evaluation data, runs
the model sanity checks (:mod:`lipsweep.attacks.checks`) on one batch, then every attack of
the suite at every eps on the same images, and returns the docs/contract.md metrics in percent.

Robust accuracy follows AutoAttack's definition: an image counts as robust when it is
classified correctly clean *and* under the attack. Attacks therefore run only on the images
the model gets right (the others are non-robust either way), which also saves their cost.
Accuracies are computed with fp32 forward passes whatever ``attack_precision`` is. On CUDA the
attacks' own forward/backward passes may use TF32 matmuls (``allow_tf32``, scoped to the attack
and restored after): the clean pass and every robust decision stay strict fp32, and
AutoAttack's survivors are re-checked in strict fp32. ``attack_images: 0`` evaluates every
image given (the whole test split with ``eval_size: 0``), clean accuracy included.

Example::

    >>> res = evaluate_robustness(model, (x_test, y_test), RobustnessConfig(attack_images=500))
    >>> res["acc_clean"], res["acc_pgd_4"], res["warnings"]
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from typing import Any, Iterable, Mapping, Optional, Union

import torch
from torch import nn

from lipsweep.attacks._registry import get_attack_class
from lipsweep.attacks.autoattack import AutoAttack
from lipsweep.attacks.base import attack_mode, check_images
from lipsweep.attacks.checks import check_monotone, check_perturbation, run_model_checks
from lipsweep.attacks.config import RobustnessConfig
from lipsweep.core.metric_names import ACC_CLEAN, attack_metric
from lipsweep.vit.precision import tf32_matmuls

_log = logging.getLogger(__name__)

CHECK_IMAGES = 64
"""Images used by the model sanity checks."""

Data = Union[tuple[torch.Tensor, torch.Tensor], Iterable]


def _collect(data: Data, limit: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``limit`` (0: all) images and labels of ``data`` as CPU tensors."""
    if (
        isinstance(data, (tuple, list))
        and len(data) == 2
        and all(isinstance(t, torch.Tensor) for t in data)
    ):
        x, y = data
        if limit:
            x, y = x[:limit], y[:limit]
    else:
        xs, ys, n = [], [], 0
        for batch in data:
            xb, yb = batch[0], batch[1]
            xs.append(xb.detach().cpu())
            ys.append(yb.detach().cpu())
            n += xb.shape[0]
            if limit and n >= limit:
                break
        if not xs:
            raise ValueError("data: no images")
        x, y = torch.cat(xs)[: limit or None], torch.cat(ys)[: limit or None]
    x, y = x.detach().cpu().float(), y.detach().cpu().long()
    if x.shape[0] == 0:
        raise ValueError("data: no images")
    try:
        check_images(x, y)
    except ValueError as exc:
        raise ValueError(f"data: {exc}") from None
    return x, y


def _resolve_device(device: Optional[Union[str, torch.device]]) -> torch.device:
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _batches(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


PROGRESS_EVERY_S = 30.0
"""Without a progress bar, at most one progress line this often (a long attack is not silent)."""


class _Progress:
    """tqdm to stderr when asked (imported lazily); else a log line at most every
    :data:`PROGRESS_EVERY_S` seconds. The per-attack result lines are logged either way."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        self.total, self.done = total, 0
        self.t0 = self.last = time.perf_counter()
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, file=sys.stderr, desc="robustness", unit="batch")

    def add(self, n: int) -> None:
        """``n`` more batches to do."""
        self.total += n
        if self.bar is not None:
            self.bar.total += n

    def step(self, desc: str, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.set_description(desc, refresh=False)
            self.bar.update(n)
            return
        now = time.perf_counter()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            _log.info(
                "robustness: %d/%d batches done (now %s), %.0f s",
                self.done,
                self.total,
                desc,
                now - self.t0,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _percent(flags: torch.Tensor, n: int) -> float:
    return 100.0 * float(flags.sum()) / n


def evaluate_robustness(
    model: nn.Module,
    data: Data,
    suite: Union[RobustnessConfig, Mapping[str, Any]],
    device: Optional[Union[str, torch.device]] = None,
    progress: bool = True,
    allow_tf32: bool = True,
    checks: bool = True,
) -> dict[str, Any]:
    """Clean and adversarial accuracy (percent) of ``model`` on the same images for every attack.

    Args:
        model: maps (B, C, H, W) pixels in [0, 1] to logits; left in its original mode and on
            its original device afterwards.
        data: an ``(x, y)`` pair of tensors, or an iterable / DataLoader of ``(x, y)`` batches.
        suite: a :class:`RobustnessConfig` (or a flat mapping of its fields).
        device: where to run; None picks CUDA when available, else CPU.
        progress: show a tqdm bar on stderr.
        allow_tf32: let the attacks' own passes use TF32 matmuls on CUDA (scoped; the
            accuracies stay strict fp32). No effect on CPU.
        checks: run the model sanity checks first (the per-epoch probes skip them: the final
            evaluation runs them once; the accuracies do not depend on them).

    Returns:
        ``acc_clean`` and ``acc_<attack>_<eps*255>`` for each attack and eps of the suite
        (:meth:`RobustnessConfig.metric_names`), plus ``attack_images`` (the number of images),
        ``attack_warnings`` (how many sanity checks failed: a scalar, so that it reaches the
        tracked metrics), ``attack_seconds`` (per metric), ``aa_stages`` (per AutoAttack
        metric: attack, n_attacked, n_fooled, seconds) and ``warnings`` (the failed checks'
        messages; empty when all pass, each also logged with ``logging.warning``).
    """
    if isinstance(suite, Mapping):
        suite = RobustnessConfig.from_flat(suite)
    if not isinstance(suite, RobustnessConfig):
        raise ValueError(f"suite must be a RobustnessConfig, got {type(suite).__name__}")
    x, y = _collect(data, suite.attack_images)
    n, bs = x.shape[0], suite.attack_batch_size
    dev = _resolve_device(device)
    first = next(model.parameters(), None)
    home = first.device if first is not None else dev
    model.to(dev)
    try:
        with attack_mode(model):
            return _evaluate(model, x, y, suite, dev, n, bs, progress, allow_tf32, checks)
    finally:
        model.to(home)


def _evaluate(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    suite: RobustnessConfig,
    dev: torch.device,
    n: int,
    bs: int,
    progress: bool,
    allow_tf32: bool = True,
    checks: bool = True,
) -> dict[str, Any]:
    warnings = (
        run_model_checks(model, x[:CHECK_IMAGES].to(dev), y[:CHECK_IMAGES].to(dev))
        if checks
        else []
    )
    plan = [
        (get_attack_class(a), e)
        for a in suite.attacks
        for e in getattr(suite, get_attack_class(a).eps_field)
    ]
    metrics: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    stages: dict[str, list[dict]] = {}

    t0 = time.perf_counter()
    correct = torch.zeros(n, dtype=torch.bool)
    bar = _Progress(len(_batches(n, bs)), progress)
    with torch.no_grad(), tf32_matmuls(False):
        for sl in _batches(n, bs):
            correct[sl] = (model(x[sl].to(dev)).argmax(1) == y[sl].to(dev)).cpu()
            bar.step("clean")
    metrics[ACC_CLEAN] = _percent(correct, n)
    seconds["clean"] = time.perf_counter() - t0
    keep = correct.nonzero().squeeze(1)
    x_ok, y_ok = x[keep], y[keep]
    ok_batches = _batches(x_ok.shape[0], bs)
    bar.add(sum(1 if cls is AutoAttack else len(ok_batches) for cls, _ in plan))
    _log.info(
        "clean accuracy %.2f%% on %d images; attacking the %d correct ones",
        metrics[ACC_CLEAN],
        n,
        x_ok.shape[0],
    )

    for cls, num in plan:
        eps, key = num / 255, f"{cls.metric_prefix}_{num}"
        metric = attack_metric(cls.metric_prefix, num)
        attack = cls.from_config(model, eps, suite)
        t0 = time.perf_counter()
        robust = torch.zeros(x_ok.shape[0], dtype=torch.bool)
        if isinstance(attack, AutoAttack):
            xa, ya = x_ok.to(dev), y_ok.to(dev)
            with tf32_matmuls(allow_tf32):
                res = attack.run(xa, ya)
            warnings += check_perturbation(res.x_adv, xa, eps, key) + res.warnings
            robust = res.robust
            if allow_tf32 and dev.type == "cuda":  # survivors re-checked in strict fp32
                with tf32_matmuls(False), torch.no_grad():
                    for sl in ok_batches:
                        robust[sl] &= (model(res.x_adv[sl]).argmax(1) == ya[sl]).cpu()
            stages[metric] = [dataclasses.asdict(s) for s in res.stages]
            bar.step(key)
        else:
            bad = False
            for sl in ok_batches:
                xb, yb = x_ok[sl].to(dev), y_ok[sl].to(dev)
                with tf32_matmuls(allow_tf32):
                    adv = attack(xb, yb)
                if not bad:
                    w = check_perturbation(adv, xb, eps, key)
                    warnings += w
                    bad = bool(w)
                with torch.no_grad(), tf32_matmuls(False):
                    robust[sl] = (model(adv).argmax(1) == yb).cpu()
                bar.step(key)
        metrics[metric] = _percent(robust, n)
        seconds[key] = time.perf_counter() - t0
        _log.info("%s = %.2f%% (%d images, %.1f s)", metric, metrics[metric], n, seconds[key])
    bar.close()
    warnings += check_monotone(metrics, images=n)
    return {
        **metrics,
        "attack_images": n,
        "attack_warnings": len(warnings),
        "attack_seconds": seconds,
        "aa_stages": stages,
        "warnings": warnings,
    }
