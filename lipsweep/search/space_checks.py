"""Checks across a space's blocks, made once its trials are expanded: every metric the
scheduler or the searcher names is one the trials report, and the scheduler's rungs fit the
trials' one length.

A trial reports ``acc_clean`` and its losses every epoch
(:data:`~lipsweep.core.metric_names.EPOCH_METRICS`), its probe metrics every ``probe_every``
epochs, and the contract metrics once, at the end: a scheduler compares trials at each rung,
so it may use only the first two; a learning searcher (Optuna) is told each trial's final
report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from lipsweep.core import metric_names
from lipsweep.core.config_base import ConfigError
from lipsweep.settings.config import TrialConfig

if TYPE_CHECKING:
    from lipsweep.search.space import SchedulerSettings, SearchSpec


def check_metrics(
    spec_search: Optional[SearchSpec],
    scheduler: Optional[SchedulerSettings],
    trials: list[dict[str, Any]],
    path: str,
) -> None:
    """Refuse metric names that no trial reports (Tune would only fail once trials ran)."""
    for field_, metric in scheduler.metrics_used() if scheduler is not None else ():
        if metric not in metric_names.EPOCH_METRICS:
            _check_probe_metric(metric, trials, path, field_)
    if spec_search is None or not spec_search.lazy or not trials:
        return
    cfg = TrialConfig.from_flat(trials[0])
    final = {metric_names.ACC_CLEAN, "epochs_done", *cfg.robustness.metric_names()}
    for name in spec_search.metric:
        if name not in final and not (
            name.startswith(metric_names.LIP_PREFIX) and cfg.run.evaluate
        ):
            raise ConfigError(
                "search.metric",
                f"no trial reports {name!r}; use one of "
                f"{sorted(final)} or a lip_* summary metric (docs: docs/contract.md)",
                path,
            )


def _check_probe_metric(
    metric: str, trials: list[dict[str, Any]], path: str, field_: str = "scheduler.metric"
) -> None:
    """A scheduler metric beyond the epoch metrics must be a probe every trial reports
    (``TrialConfig.epoch_metric_names``: probes on, the eps among ``pgd_eps``)."""
    reported = [set(TrialConfig.from_flat(t).probe_metric_names()) for t in trials]
    common = set.intersection(*reported) if reported else set()
    if metric in common:
        return
    if not metric_names.is_probe_metric(metric):
        why = "it is not a per-epoch metric"
    elif not all(reported):
        why = "probes are off (probe_every: 0) in some trials; set probe_every >= 1"
    else:
        why = "not every trial's probes report it (pgd_eps, probe_images, probe_lip_images)"
    usable = list(metric_names.EPOCH_METRICS) + sorted(common)
    raise ConfigError(
        field_,
        f"{metric!r} is not reported every epoch: {why}; the scheduler can use one of {usable}",
        path,
    )


def trial_epochs(search: Optional[SearchSpec], trials: list[dict[str, Any]], path: str) -> int:
    """The one trial length a scheduler's rungs are set by; ConfigError naming ``scheduler``
    where trials run different epochs (a rung at one trial's last epoch would stop it before
    its final report)."""
    if search is not None and search.lazy:
        dists = [search.space.entries.get("epochs")]
        dists += [branch.get("epochs") for branch in search.space.branches.values()]
        drawn = [d for d in dists if d is not None]
        if any(d.kind != "constant" for d in drawn) or len({d.args for d in drawn}) > 1:
            raise ConfigError(
                "scheduler",
                "search.space draws epochs, and a scheduler needs one trial length (its "
                "rungs end there): put epochs in fixed:",
                path,
            )
    values = sorted({int(t["epochs"]) for t in trials})
    if len(values) > 1:
        raise ConfigError(
            "scheduler",
            f"trials run different epochs ({values[:6]}), and a scheduler needs one trial "
            "length (its rungs end there): put epochs in fixed:",
            path,
        )
    return values[0] if values else int(TrialConfig().to_flat()["epochs"])


def check_scheduler_reach(
    scheduler: SchedulerSettings, trials: list[dict[str, Any]], epochs: int, path: str
) -> None:
    """Refuse a scheduler that could never stop a trial: its rungs past the trials' last
    epoch (the member's ``check_epochs``), or a probe metric first measured after it."""
    check = getattr(scheduler, "check_epochs", None)
    if check is not None:
        try:
            check(epochs)
        except ConfigError as err:
            raise err.with_source(path) from None
    max_t = getattr(scheduler, "max_t", None) or epochs
    every = max((int(t.get("probe_every") or 0) for t in trials), default=0)
    for field_, metric in scheduler.metrics_used():
        if metric_names.is_probe_metric(metric) and every > max_t:
            raise ConfigError(
                field_,
                f"{metric!r} is probed every {every} epochs, first at epoch {every}, after "
                f"the trials' last epoch ({max_t}): the scheduler could never compare trials "
                f"on it; set probe_every below {max_t}",
                path,
            )
