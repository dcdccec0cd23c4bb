"""Per-epoch robustness probes: cheap proxies of the final robustness metrics.

After every ``probe_every``-th epoch a trial measures, on one fixed probe subset of its
held-out evaluation images:

- ``probe_acc_pgd_<eps>``: PGD accuracy (percent) at each ``pgd_eps``, by the same code as the
  final evaluation (:func:`lipsweep.attacks.evaluate_robustness` with the trial's PGD settings:
  steps, step size, restarts, ``attack_seed``, precision) on the first ``probe_images`` probe
  images. On the same images it gives the final ``acc_pgd_<eps>`` exactly.
- ``probe_lip_jacobian_median``: the median of ||J_f(x)||_2 (docs/science.md §1.5; paper
  Fig. 4) over the first ``probe_lip_images`` probe images, by the registered estimator of the
  trial's ``lip_route`` (the one ``lipschitz_summary`` uses).

Beside each, ``<metric>_se``: the standard error the probe's image sample alone puts into it
(:mod:`lipsweep.core.measurement`: Agresti-Coull for an accuracy on ``n`` images, the
order-statistic one for the median), which ``moasha`` reads as its measurement noise.

The probe subset is :func:`probe_indices`: a sorted subset of the evaluation subset drawn with
the fixed :data:`PROBE_SEED`, never the trial seed, so every trial and epoch of a sweep probes
the same images. The evaluation subset is itself drawn from the test split by ``eval_seed``
(lipsweep.data.loading), so the probe images are held out from training. Cost: a probe epoch
runs ``probe_images * (1 + len(pgd_eps) * (2 * pgd_steps + 1))`` passes for PGD and
``probe_lip_images * (1 + C)`` (exact route) for the Jacobian (lipsweep/trial/probe_cost.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from lipsweep.attacks._registry import attack_vocab
from lipsweep.core.measurement import accuracy_se, median_se
from lipsweep.core.metric_names import (
    PROBE_LIP_JACOBIAN_MEDIAN,
    PROBE_SECONDS,
    attack_metric,
    probe_attack_metric,
    se_metric,
)
from lipsweep.data.loading import ImageSplits, eval_subset_indices, to_unit
from lipsweep.settings.config import TrialConfig

_log = logging.getLogger(__name__)

PROBE_SEED = 28
"""Seed of the probe subset; fixed, so that every trial of every sweep on the same
evaluation subset probes the same images."""
PROBE_ATTACK = "pgd"
"""The registered attack the probe runs."""


@dataclass(frozen=True)
class ProbeSet:
    """The probe images: uint8 (N, 3, H, W) and labels on the trial's device, and their
    positions in the evaluation subset."""

    x: torch.Tensor
    y: torch.Tensor
    indices: torch.Tensor


def probe_indices(n_eval: int, size: int, seed: int = PROBE_SEED) -> torch.Tensor:
    """Sorted positions in the evaluation subset (of ``n_eval`` images) of the ``size`` probe
    images (all of them when ``size >= n_eval``); a function of (n_eval, size, seed) only."""
    return eval_subset_indices(n_eval, size, seed)


def probe_set(splits: ImageSplits, cfg: TrialConfig) -> ProbeSet:
    """The trial's probe images, cut from ``splits``' evaluation subset."""
    size = max(cfg.probe.probe_images, cfg.probe.probe_lip_images)
    idx = probe_indices(len(splits.x_eval), size)
    if size > len(idx):
        _log.info("probes: %d images asked, the evaluation subset has %d", size, len(idx))
    dev_idx = idx.to(splits.x_eval.device)
    return ProbeSet(splits.x_eval[dev_idx], splits.y_eval[dev_idx], idx)


def probe_pgd(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: TrialConfig, device: torch.device
) -> dict[str, float]:
    """``probe_acc_pgd_<eps>`` for every ``pgd_eps``: the final evaluation's PGD on ``x``
    ([0, 1] pixels), without its model sanity checks."""
    from lipsweep.attacks import evaluate_robustness

    suite = cfg.robustness.replace(attacks=[PROBE_ATTACK], attack_images=0)
    res = evaluate_robustness(model, (x, y), suite, device=device, progress=False, checks=False)
    prefix = attack_vocab(PROBE_ATTACK).metric_prefix
    return {
        probe_attack_metric(prefix, e): float(res[attack_metric(prefix, e)]) for e in suite.pgd_eps
    }


def probe_jacobian_median(model: nn.Module, x: torch.Tensor, cfg: TrialConfig) -> float:
    """Median of ||J_f(x)||_2 over ``x`` ([0, 1] pixels, on the model's device), by the
    estimator ``lipschitz_summary`` uses (``lip_route``, ``lip_iters``, ``lip_tol``)."""
    return float(np.median(probe_jacobian_norms(model, x, cfg)))


def probe_jacobian_norms(model: nn.Module, x: torch.Tensor, cfg: TrialConfig) -> np.ndarray:
    """||J_f(x)||_2 per image of ``x`` (:func:`probe_jacobian_median`'s values)."""
    from lipsweep.lipschitz import create_estimator, resolve_route

    lip = cfg.lipschitz
    route = resolve_route(lip.lip_route, cfg.model.num_classes)
    est = create_estimator(f"jacobian_{route}", lip)
    bs = lip.lip_batch_size
    norms = [
        est(model, x[i : i + bs])["jacobian_norm"].detach().cpu().numpy()
        for i in range(0, x.shape[0], bs)
    ]
    return np.concatenate(norms)


def run_probes(
    model: nn.Module, probes: ProbeSet, cfg: TrialConfig, device: torch.device
) -> dict[str, float]:
    """Every probe metric of ``cfg`` on ``probes``, plus ``probe_seconds``. The model's
    train/eval modes and ``requires_grad`` flags are restored after."""
    t0 = time.perf_counter()
    x = to_unit(probes.x)
    out: dict[str, float] = {}
    n_pgd, n_lip = cfg.probe.probe_images, cfg.probe.probe_lip_images
    if n_pgd:
        accs = probe_pgd(model, x[:n_pgd], probes.y[:n_pgd], cfg, device)
        n = len(x[:n_pgd])
        out.update(accs | {se_metric(k): accuracy_se(v, n) for k, v in accs.items()})
    if n_lip:
        norms = probe_jacobian_norms(model, x[:n_lip].to(device), cfg)
        out[PROBE_LIP_JACOBIAN_MEDIAN] = float(np.median(norms))
        out[se_metric(PROBE_LIP_JACOBIAN_MEDIAN)] = median_se(norms)
    out[PROBE_SECONDS] = time.perf_counter() - t0
    _log.info("probes: %s", "  ".join(f"{k} {v:.4g}" for k, v in out.items()))
    return out
