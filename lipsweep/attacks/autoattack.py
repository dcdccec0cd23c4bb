"""AutoAttack (Croce & Hein, "Reliable evaluation of adversarial robustness with an ensemble
of diverse parameter-free attacks", ICML 2020) through ``pyautoattack``.

Why pyautoattack: it is the authors' own code (fra31/auto-attack) repackaged on PyPI with
pinned releases, so it is AutoAttack as published and as RobustBench runs it, including the
cascade (each attack runs only on the points that survived the previous ones), the
authors' sanity checks and the standard version's settings. torchattacks ships a second,
partly rewritten copy (its APGD recomputes the step-size schedule on every call, its
AutoAttack is a MultiAttack of independent objects); we keep it as a test-only reference
implementation to check this adapter against.

The paper (Sec. 5) runs AutoAttack at eps = 2/255 "with 10 steps". The default here is
``version='custom'`` with the standard attack list (APGD-CE, APGD-T, FAB-T, Square), each
built *at construction* with ``n_iter=10`` (Square: 10 queries), ``n_restarts=1`` and 9 target
classes (capped at num_classes - 1). Two traps of the package are avoided on purpose:

- with ``version='custom'`` the package builds APGD with ``n_restarts=5``;
- ``APGDAttack.__init__`` derives the step-size checkpoints from ``n_iter``
  (``n_iter_2 = max(int(0.22 n_iter), 1)``, ``n_iter_min``, ``size_decr``), so setting
  ``n_iter`` afterwards leaves the schedule of 100 iterations (first check after 22 steps:
  never, in a 10-step run). This adapter therefore replaces the package's attack objects with
  ones constructed with the iteration count.

``version='standard'`` runs the package's standard AutoAttack unchanged (100 iterations,
5000 Square queries). ``run_standard_evaluation`` returns adversarial images (for fooled
points; the clean image otherwise), not an accuracy: the robust accuracy here is recomputed
from those images with one more forward pass. The package reseeds torch's global RNG; the
adapter restores the caller's RNG state afterwards.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import nn

from lipsweep.attacks._registry import (
    STANDARD_ATTACKS,
    AutoAttackSettings,
    register_attack,
)
from lipsweep.attacks.autoattack_tags import describe
from lipsweep.attacks.base import Attack, attack_mode, check_images
from lipsweep.core.config_base import check_int

_log = logging.getLogger(__name__)


@dataclass
class AttackStage:
    """One attack of the cascade: how many points it was run on, how many it fooled, time."""

    attack: str
    n_attacked: int = 0
    n_fooled: int = 0
    seconds: float = 0.0


@dataclass
class AutoAttackResult:
    """Adversarial images, per-image robustness and the per-attack breakdown."""

    x_adv: torch.Tensor
    robust: torch.Tensor
    """(B,) bool: correct on the clean image and on ``x_adv``."""
    stages: list[AttackStage]
    warnings: list[str] = field(default_factory=list)
    """Warnings the package's own checks logged during the run."""

    @property
    def robust_accuracy(self) -> float:
        """Robust accuracy in percent."""
        n = self.robust.numel()
        return 100.0 * float(self.robust.sum()) / n if n else float("nan")


class _WarningCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"pyautoattack: {record.getMessage()}")


@register_attack("autoattack")
class AutoAttack(Attack):
    """AutoAttack, L-infinity, via pyautoattack, with the iteration count honoured.

    Args:
        model: maps (B, C, H, W) pixels in [0, 1] to logits.
        eps: L-infinity radius in pixel units (paper: 2/255).
        settings: its :class:`~lipsweep.attacks._registry.AutoAttackSettings`:
            ``aa_version`` 'custom' (``aa_attacks``, ``aa_iters``, ``aa_restarts``) or
            'standard' (the package's standard AutoAttack: 100 iterations, the standard
            four attacks, 1 restart); ``aa_iters`` iterations per attack (APGD/FAB
            iterations, Square queries).
        n_target_classes: target classes of APGD-T and FAB-T (capped at num_classes - 1).
        seed: the package's attack seed (fixed for reproducibility; None: 0).
        batch_size: the package's internal batch size.
        precision: 'fp32' or 'bf16' autocast for the attack's forward/backward passes.

    Shape:
        - x: (B, C, H, W), values in [0, 1]; y: (B,) integer labels.
        - output: (B, C, H, W) images in [0, 1] within eps of x: the adversarial image for
          every fooled point, the clean image for the others.

    Example::

        >>> res = AutoAttack(model, eps=2/255).run(x, y)
        >>> res.robust_accuracy, [(s.attack, s.n_attacked, s.seconds) for s in res.stages]
    """

    settings: AutoAttackSettings

    def __init__(
        self,
        model: nn.Module,
        eps: float,
        settings: Optional[AutoAttackSettings] = None,
        *,
        n_target_classes: int = 9,
        precision: str = "fp32",
        seed: Optional[int] = None,
        batch_size: int = 256,
    ) -> None:
        super().__init__(
            model, eps, settings, precision=precision, seed=seed, batch_size=batch_size
        )
        for name, value in (("n_target_classes", n_target_classes), ("batch_size", batch_size)):
            check_int(name, value, 1)
        cfg = self.settings
        self.version, self.attacks = cfg.aa_version, list(cfg.aa_attacks)
        self.iters, self.restarts = cfg.aa_iters, cfg.aa_restarts
        self.n_target_classes, self.seed = n_target_classes, 0 if seed is None else seed

    def describe(self) -> dict[str, Any]:
        """What this attack runs, as recorded next to its metrics: version, attacks,
        iterations of APGD/FAB, Square queries and restarts."""
        return describe(self.version, self.attacks, self.iters, self.restarts)

    def build(self, n_classes: int, device: torch.device):
        """The configured ``pyautoattack.AutoAttack`` (attacks built with ``iters``)."""
        from pyautoattack import AutoAttack as PackageAutoAttack
        from pyautoattack.autopgd_base import APGDAttack, APGDAttack_targeted
        from pyautoattack.fab_pt import FABAttack_PT
        from pyautoattack.square import SquareAttack

        n_targets = max(1, min(self.n_target_classes, n_classes - 1))
        common = dict(eps=self.eps, norm="Linf", seed=self.seed, device=device)
        if self.version == "standard":
            aa = PackageAutoAttack(self.logits, version="standard", **common)
        else:
            aa = PackageAutoAttack(
                self.logits, version="custom", attacks=list(self.attacks), **common
            )
            aa.apgd = APGDAttack(
                self.logits,
                n_iter=self.iters,
                n_restarts=self.restarts,
                eot_iter=1,
                rho=0.75,
                verbose=False,
                logger=aa.logger,
                **common,
            )
            aa.apgd_targeted = APGDAttack_targeted(
                self.logits,
                n_iter=self.iters,
                n_restarts=self.restarts,
                eot_iter=1,
                rho=0.75,
                n_target_classes=n_targets,
                verbose=False,
                logger=aa.logger,
                **common,
            )
            aa.fab = FABAttack_PT(
                self.logits,
                n_iter=self.iters,
                n_restarts=self.restarts,
                n_target_classes=n_targets,
                verbose=False,
                **common,
            )
            aa.square = SquareAttack(
                self.logits,
                n_queries=self.iters,
                p_init=0.8,
                n_restarts=1,
                verbose=False,
                resc_schedule=False,
                **common,
            )
        aa.apgd_targeted.n_target_classes = n_targets
        aa.fab.n_target_classes = n_targets
        return aa

    def stage_steps(self, n_classes: int) -> dict[str, float]:
        """Forward-backward passes one point costs in each stage, in running order (for time
        estimates): APGD ``iters`` per restart, times the target classes when targeted; FAB one
        per iteration and target (every class when untargeted); Square a forward, about a
        third of a pass, per query."""
        targets = max(1, min(self.n_target_classes, n_classes - 1))
        runs = self.iters * self.restarts
        per = {"apgd-ce": runs, "apgd-dlr": runs, "apgd-t": runs * targets}
        per |= {"fab-t": runs * targets, "fab": runs * n_classes}
        per["square"] = self.describe()["square_queries"] / 3
        order = STANDARD_ATTACKS if self.version == "standard" else self.attacks
        return {a: float(per[a]) for a in order}

    def step_seconds(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """Seconds per point of one forward-backward pass through the model, timed on up to
        ``batch_size`` points of ``x`` (after one untimed pass)."""
        xb, yb = x[: self.batch_size].detach(), y[: self.batch_size]
        sync = torch.cuda.synchronize if xb.device.type == "cuda" else (lambda: None)
        with attack_mode(self.model):
            for _ in range(2):  # the first pass warms up, the second is timed
                sync()
                t0 = time.perf_counter()
                xr = xb.clone().requires_grad_(True)
                nn.functional.cross_entropy(self.logits(xr), yb).backward()
                sync()
        return (time.perf_counter() - t0) / max(1, xb.shape[0])

    def _instrument(
        self,
        aa,
        stages: dict[str, AttackStage],
        device: torch.device,
        progress: Optional[dict[str, Any]] = None,
    ) -> None:
        """Wrap each attack object's ``perturb`` to count points and time per attack; with
        ``progress`` (the clean-correct count and the seconds per point-step), log each stage's
        start with its estimate and each of its batches."""
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        order = list(stages)

        def wrap(obj, name_of):
            perturb = obj.perturb

            def timed(x, y, *args, **kwargs):
                name = name_of()
                stage = stages[name]
                if progress is not None and stage.n_attacked == 0:
                    self._log_stage_start(name, order, progress)
                sync()
                t0 = time.perf_counter()
                out = perturb(x, y, *args, **kwargs)
                sync()
                stage.seconds += time.perf_counter() - t0
                stage.n_attacked += x.shape[0]
                if progress is not None:
                    self._log_batch(name, stage, out, y, progress)
                return out

            obj.perturb = timed

        wrap(aa.apgd, lambda: "apgd-ce" if aa.apgd.loss == "ce" else "apgd-dlr")
        wrap(aa.apgd_targeted, lambda: "apgd-t")
        wrap(aa.fab, lambda: "fab-t" if aa.fab.targeted else "fab")
        wrap(aa.square, lambda: "square")

    def _log_stage_start(self, name: str, order: list[str], progress: dict[str, Any]) -> None:
        """One line as a stage starts: its points (those no earlier stage fooled), estimate."""
        points = progress["left"]
        progress["stage_points"] = points
        estimate = points * progress["steps"][name] * progress["step_s"]
        _log.info(
            "autoattack eps %.4g, stage %d/%d %s: %d points, estimated %.0f s",
            self.eps,
            order.index(name) + 1,
            len(order),
            name,
            points,
            estimate,
        )

    def _log_batch(
        self, name: str, stage: AttackStage, x_adv: Any, y: torch.Tensor, progress: dict[str, Any]
    ) -> None:
        """One line per batch of a stage: points done of the stage's, fooled so far, time."""
        if isinstance(x_adv, torch.Tensor) and x_adv.shape[0] == y.shape[0]:
            with torch.no_grad():
                fooled = int((self.logits(x_adv).argmax(1) != y).sum())
            progress["left"] -= fooled
            progress["fooled"][name] = progress["fooled"].get(name, 0) + fooled
        _log.info(
            "autoattack %s: %d/%d points, %d fooled, %.0f s",
            name,
            stage.n_attacked,
            progress["stage_points"],
            progress["fooled"].get(name, 0),
            stage.seconds,
        )

    def estimate(self, n_points: int, n_classes: int, step_s: float) -> tuple[float, float]:
        """(seconds of the first stage, seconds of all stages if no point were fooled) for
        ``n_points`` clean-correct points at ``step_s`` seconds per point-step."""
        per = list(self.stage_steps(n_classes).values())
        return n_points * per[0] * step_s, n_points * sum(per) * step_s

    def run(self, x: torch.Tensor, y: torch.Tensor, progress: bool = False) -> AutoAttackResult:
        """Run the cascade; robust accuracy recomputed from the returned images. ``progress``:
        log an estimate first (one timed forward-backward pass), then each stage's start and
        batches (``lipsweep confirm``, where a stage takes minutes)."""
        check_images(x, y)
        x, y = x.detach(), y.detach()
        device = x.device
        order = list(STANDARD_ATTACKS if self.version == "standard" else self.attacks)
        stages = {a: AttackStage(a) for a in order}
        collector = _WarningCollector()
        aa_logger = logging.getLogger("auto-attack")
        rng_devices = [device] if device.type == "cuda" else []
        with attack_mode(self.model), torch.random.fork_rng(devices=rng_devices):
            if x.shape[0] == 0:
                return AutoAttackResult(x.clone(), torch.zeros(0, dtype=torch.bool), [])
            with torch.no_grad():
                n_classes = self.model(x[:1]).shape[-1]
            aa = self.build(n_classes, device)
            watch = self._progress(x, y, n_classes) if progress else None
            self._instrument(aa, stages, device, watch)
            aa_logger.addHandler(collector)
            try:
                x_adv, _ = aa.run_standard_evaluation(x, y, batch_size=self.batch_size)
            finally:
                aa_logger.removeHandler(collector)
            robust = torch.zeros_like(y, dtype=torch.bool)
            with torch.no_grad():
                for i in range(0, x.shape[0], self.batch_size):
                    sl = slice(i, i + self.batch_size)
                    clean_ok = self.model(x[sl]).argmax(1) == y[sl]
                    robust[sl] = clean_ok & (self.model(x_adv[sl]).argmax(1) == y[sl])
        ordered = [stages[a] for a in order]
        survivors = [s.n_attacked for s in ordered[1:]] + [int(robust.sum())]
        for stage, left in zip(ordered, survivors):
            stage.n_fooled = stage.n_attacked - left if stage.n_attacked else 0
        for msg in collector.messages:
            _log.warning("%s", msg)
        return AutoAttackResult(x_adv.detach(), robust.cpu(), ordered, collector.messages)

    def _progress(self, x: torch.Tensor, y: torch.Tensor, n_classes: int) -> dict[str, Any]:
        """The clean-correct count and the timed step that the progress lines estimate from;
        logs the estimate of the whole run first."""
        bs = self.batch_size
        with torch.no_grad():
            hits = [
                self.logits(x[i : i + bs]).argmax(1) == y[i : i + bs] for i in range(0, len(x), bs)
            ]
        left = int(sum(int(h.sum()) for h in hits))
        step_s = self.step_seconds(x, y)
        first, most = self.estimate(left, n_classes, step_s)
        steps = self.stage_steps(n_classes)
        _log.info(
            "autoattack eps %.4g: %d points, %d correct clean; estimated %.0f s for %s, at most "
            "%.0f s for all %d stages (%.3g s per point-step; later stages attack only the "
            "points the earlier ones did not fool)",
            self.eps,
            x.shape[0],
            left,
            first,
            next(iter(steps)),
            most,
            len(steps),
            step_s,
        )
        return {"left": left, "step_s": step_s, "steps": steps, "fooled": {}, "stage_points": 0}

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.run(x, y).x_adv
