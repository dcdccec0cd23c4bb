"""What the per-epoch probes cost, in counted passes through the network.

A pass is one image through the whole network: a forward, a backward (to the weights in
training, to the input in the attacks and the Jacobian) or a forward-mode JVP each count 1.
Per epoch (docs/benchmarks.md, "Per-epoch robustness probes"):

- training: ``2 * T``, T = images trained per epoch (``steps * batch_size``, the last partial
  batch dropped), one forward and one backward each;
- PGD probe: ``n_p * (1 + E * (R * 2 * S + [R > 1] * R + 1))``, with n_p = probe_images, E =
  the number of ``pgd_eps``, S = ``pgd_steps``, R = ``pgd_restarts``: the clean forward, then
  per eps S forward + backward steps per restart, a forward per restart to pick the worst
  (R > 1 only) and the robust forward. Only the images classified correctly are attacked, so
  with all of them correct this is an upper bound (``correct_fraction`` scales the attack
  part);
- Jacobian probe: ``n_j * (1 + C)`` on the exact route (one forward, C input backward passes)
  or ``n_j * (2 + 2 * k)`` on Lanczos/power (one forward and the backward that records
  J^T u, then k = J J^T applications, each two reverse passes, at most ``lip_iters``;
  ``lipschitz.jacobian.LogitGram``), n_j = probe_lip_images, C = classes;
- fraction = (PGD + Jacobian) / (probe_every * training).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from lipsweep.settings.config import TrialConfig


@dataclass(frozen=True)
class ProbeCost:
    """Counted passes of one epoch's training and of one probe, and their ratio."""

    train_passes: int
    pgd_passes: float
    jacobian_passes: float
    probe_every: int

    @property
    def fraction(self) -> float:
        """Probe passes per epoch as a fraction of the epoch's training passes."""
        probe = self.pgd_passes + self.jacobian_passes
        return probe / (max(1, self.probe_every) * self.train_passes)


def train_images_per_epoch(train_images: int, batch_size: int) -> int:
    """Images one epoch trains on: whole batches only (``num_train_batches``, drop_last)."""
    return (train_images // batch_size) * batch_size if train_images >= batch_size else train_images


def probe_cost(
    cfg: TrialConfig,
    train_images: int,
    eval_images: Optional[int] = None,
    lanczos_iters: Optional[float] = None,
    correct_fraction: float = 1.0,
) -> ProbeCost:
    """Counted passes of ``cfg``'s training epoch and probes (module docstring).

    Args:
        cfg: the trial (its ``probe_every`` 0 is costed as 1: what turning probes on costs).
        train_images: training images before batching (CIFAR: 50,000).
        eval_images: size of the evaluation subset the probe images come from (None: no cap).
        lanczos_iters: mean J J^T applications of the iterative routes (None: ``lip_iters``,
            the cap, an upper bound).
        correct_fraction: share of the probe images classified correctly, the ones PGD
            attacks (1: the upper bound).
    """
    from lipsweep.lipschitz import resolve_route

    p, r = cfg.probe, cfg.robustness
    cap = eval_images if eval_images else None
    n_p = min(p.probe_images, cap) if cap else p.probe_images
    n_j = min(p.probe_lip_images, cap) if cap else p.probe_lip_images
    steps, restarts, n_eps = r.pgd_steps, r.pgd_restarts, len(r.pgd_eps)
    per_eps = restarts * 2 * steps + (restarts if restarts > 1 else 0) + 1
    pgd = n_p + correct_fraction * n_p * n_eps * per_eps
    classes = cfg.model.num_classes
    route = resolve_route(cfg.lipschitz.lip_route, classes)
    if route == "exact":
        jac = float(n_j * (1 + classes))
    else:
        k = cfg.lipschitz.lip_iters if lanczos_iters is None else lanczos_iters
        jac = n_j * (2 + 2 * k)
    train = 2 * train_images_per_epoch(train_images, cfg.optim.batch_size)
    return ProbeCost(train, pgd, jac, max(1, p.probe_every))
