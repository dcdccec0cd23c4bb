"""Every metric name lipsweep reports, defined once (torch-free; docs/contract.md names).

Attacks name their accuracies ``acc_<metric_prefix>_<n>`` (eps = n/255, :func:`attack_metric`;
each attack class declares its ``metric_prefix``); the Lipschitz estimates name theirs
``<prefix>_<stat>`` (:func:`lip_metric`). Presenters (export card, plots, summaries, the
scheduler's check) import the tuples below instead of listing names.
"""

from __future__ import annotations

from typing import Iterable

ACC_PREFIX = "acc_"
"""Every accuracy (a percentage) is named ``acc_...``; other metrics are not."""
ACC_CLEAN = "acc_clean"
"""Clean accuracy (%) on the trial's seeded evaluation subset (the images the attacks use)."""
LOSS, LOSS_CE, LOSS_REG = "loss", "loss_ce", "loss_reg"
EPOCH_METRICS = (ACC_CLEAN, LOSS, LOSS_CE, LOSS_REG)
"""Reported after every epoch; with probes on (``probe_every``), the trial's
:func:`probe_metrics` too (``TrialConfig.epoch_metric_names``): what a scheduler compares by."""
SE_SUFFIX = "_se"


def se_metric(name: str) -> str:
    """The standard error of ``name``'s measurement, reported beside it (lipsweep.core.
    measurement): ``probe_acc_pgd_4`` -> ``probe_acc_pgd_4_se``."""
    return name + SE_SUFFIX


EPOCH_ACC_CLEAN = "epoch_acc_clean"
"""MLflow name of the per-epoch held-out accuracy (not the final ``acc_clean``)."""


def attack_metric(prefix: str, eps_255: int) -> str:
    """Robust accuracy name of attack ``prefix`` at eps = ``eps_255``/255: ``acc_pgd_4``."""
    return f"{ACC_PREFIX}{prefix}_{eps_255}"


def aa_std_metric(eps_255: int) -> str:
    """Standard AutoAttack accuracy (``confirm``) at eps = ``eps_255``/255: ``acc_aa_std_4``."""
    return attack_metric("aa_std", eps_255)


AA_STD_PREFIX = aa_std_metric(0)[:-1]
"""``acc_aa_std_``: the prefix of :func:`aa_std_metric`'s names."""
_AA_PREFIX = attack_metric("aa", 0)[:-1]


def aa_to_std(name: str) -> str:
    """``acc_aa_<n>`` -> ``acc_aa_std_<n>`` (:func:`aa_std_metric`); other names unchanged."""
    rest = name[len(_AA_PREFIX) :]
    digits = rest.isdecimal()  # as the regex ``\d+`` it replaces
    return AA_STD_PREFIX + rest if name.startswith(_AA_PREFIX) and digits else name


ATTACK_METRICS = tuple(
    attack_metric(p, e) for p, e in (("fgsm", 2), ("fgsm", 4), ("pgd", 2), ("pgd", 4), ("aa", 2))
)
"""The default robustness suite's accuracies (docs/contract.md)."""

LIP_PREFIX = "lip_"
"""Every Lipschitz estimate is named ``lip_...`` (settings such as ``lip_iters`` are not)."""
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

LIP_PER_MARGIN = "lip_jacobian_per_margin"
"""Prefix of ||J_f(x)||_2 / logit margin (mean, median, p90; lipschitz/margin.py)."""
LIP_PER_MARGIN_METRICS = tuple(lip_metric(LIP_PER_MARGIN, s) for s in ("mean", "median", "p90"))
LIP_PER_MARGIN_MEDIAN = lip_metric(LIP_PER_MARGIN, "median")
LIP_SOFTMAX = "lip_softmax"
"""Prefix of the softmax-Jacobian ratio family (``lip_softmax_ratio_median``, ...)."""
LIP_SOFTMAX_ROWS = lip_metric(LIP_SOFTMAX, "rows")
LIP_HEAD = "lip_head"
"""Prefix of the per-head bound family (``lip_head_thm2_mean``, ...; Thm. 1-3)."""

PROBE_PREFIX = "probe_"
"""Per-epoch robustness probes are named ``probe_<final metric>``: the same
measurement as the final metric, on the fixed probe subset (lipsweep/trial/probes.py)."""


def probe_metric(final_name: str) -> str:
    """Per-epoch probe counterpart of a final metric: ``acc_pgd_4`` -> ``probe_acc_pgd_4``."""
    return f"{PROBE_PREFIX}{final_name}"


def probe_attack_metric(prefix: str, eps_255: int) -> str:
    """Probe accuracy of attack ``prefix`` (its ``metric_prefix``) at eps = ``eps_255``/255:
    ``probe_acc_pgd_4``."""
    return probe_metric(attack_metric(prefix, eps_255))


PROBE_LIP_JACOBIAN_MEDIAN = probe_metric(LIP_JACOBIAN_MEDIAN)
"""Median of ||J_f(x)||_2 over the probe's Jacobian images, after each probed epoch."""
PROBE_SECONDS = probe_metric("seconds")
"""Wall seconds of one epoch's probes (a cost figure, not a metric a scheduler may use)."""


def probe_metrics(prefix: str, eps_255s: Iterable[int], jacobian: bool) -> tuple[str, ...]:
    """The probe metrics a trial reports: attack ``prefix`` at each eps, then (``jacobian``)
    the ||J_f|| median."""
    names = tuple(probe_attack_metric(prefix, e) for e in eps_255s)
    return names + ((PROBE_LIP_JACOBIAN_MEDIAN,) if jacobian else ())


def is_probe_metric(name: str) -> bool:
    """Whether ``name`` is a per-epoch probe value (``probe_...``, :data:`PROBE_SECONDS` too)."""
    return name.startswith(PROBE_PREFIX)


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
