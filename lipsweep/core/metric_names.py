"""Every metric name lipsweep reports, defined once (torch-free; docs/contract.md names).

Attacks name their accuracies ``acc_<metric_prefix>_<n>`` (eps = n/255, :func:`attack_metric`;
each attack class declares its ``metric_prefix``); the Lipschitz estimates name theirs
``<prefix>_<stat>`` (:func:`lip_metric`). Presenters (export card, plots, summaries, the
scheduler's check) import the tuples below instead of listing names.
"""

from __future__ import annotations

ACC_CLEAN = "acc_clean"
"""Clean accuracy (%) on the trial's seeded evaluation subset (the images the attacks use)."""
LOSS, LOSS_CE, LOSS_REG = "loss", "loss_ce", "loss_reg"
EPOCH_METRICS = (ACC_CLEAN, LOSS, LOSS_CE, LOSS_REG)
"""Reported after every epoch: the only metrics a scheduler (ASHA) can compare trials by."""
EPOCH_ACC_CLEAN = "epoch_acc_clean"
"""MLflow name of the per-epoch held-out accuracy (not the final ``acc_clean``)."""

ATTACK_TITLES = {"fgsm": "FGSM", "pgd": "PGD", "aa": "AutoAttack"}
"""Display name of each attack's ``metric_prefix``."""


def attack_metric(prefix: str, eps_255: int) -> str:
    """Robust accuracy name of attack ``prefix`` at eps = ``eps_255``/255: ``acc_pgd_4``."""
    return f"acc_{prefix}_{eps_255}"


ATTACK_METRICS = tuple(
    attack_metric(p, e) for p, e in (("fgsm", 2), ("fgsm", 4), ("pgd", 2), ("pgd", 4), ("aa", 2))
)
"""The default robustness suite's accuracies (docs/contract.md)."""

LIP_JACOBIAN = "lip_jacobian"
LIP_JACOBIAN_TOKENS = "lip_jacobian_tokens"
LIP_STATS = ("mean", "median", "p90", "p99", "max")


def lip_metric(prefix: str, stat: str) -> str:
    """Lipschitz summary name: ``lip_metric('lip_jacobian', 'median')``."""
    return f"{prefix}_{stat}"


LIP_METRICS = tuple(
    lip_metric(p, s) for p in (LIP_JACOBIAN, LIP_JACOBIAN_TOKENS) for s in LIP_STATS
)
"""Distribution of ||J_f(x)||_2 over the images, w.r.t. the pixels and the tokens (Fig. 4)."""
LIP_JACOBIAN_MEDIAN = lip_metric(LIP_JACOBIAN, "median")

SPEC_METRICS = (ACC_CLEAN, *ATTACK_METRICS, *LIP_METRICS)
"""The final metrics of a trial (docs/contract.md), in display order."""
SUMMARY_METRICS = (ACC_CLEAN, *ATTACK_METRICS, LIP_JACOBIAN_MEDIAN)
"""The metrics a one-line summary of a finished trial shows (those present)."""
HEADLINE_METRICS = (
    ACC_CLEAN,
    attack_metric("fgsm", 4),
    attack_metric("pgd", 4),
    attack_metric("aa", 2),
    LIP_JACOBIAN_MEDIAN,
)
"""The shorter line a sweep logs per finished trial."""


def metric_title(name: str) -> str:
    """Axis title of a metric: ``acc_pgd_4`` -> ``PGD, ε = 4/255``."""
    if name == ACC_CLEAN:
        return "clean accuracy (%)"
    parts = name.split("_")
    if len(parts) == 3 and parts[0] == "acc" and parts[2].isdigit():
        return f"{ATTACK_TITLES.get(parts[1], parts[1])}, ε = {parts[2]}/255"
    return name
