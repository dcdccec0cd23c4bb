"""``sweep``: validate everything first, then start Ray; every trial's outcome comes back."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lipsweep.api.options import SweepOptions
from lipsweep.api.results import OutcomeCounts, SweepResult, TrialRun
from lipsweep.core.options import check_experiment_name

if TYPE_CHECKING:
    from lipsweep.search.space import SweepSpec

_log = logging.getLogger("lipsweep.sweep")


def preflight(spec: "SweepSpec") -> None:
    """Data and device checks the driver can make before Ray starts (ConfigError)."""
    from lipsweep.data.remote import check_sweep_download
    from lipsweep.trial.device import check_sweep_device

    trials = spec.trials or [spec.fixed]
    check_sweep_download(spec.num_trials, trials)
    check_sweep_device(spec.resources.gpu, trials)


def _counts(trials: list, total: int) -> OutcomeCounts:
    from lipsweep.sweep.callbacks import outcome_counts

    return OutcomeCounts(**outcome_counts({t.trial_id: t for t in trials}, total))


def run(opts: SweepOptions) -> SweepResult:
    """Run (or resume, or with ``dry_run`` only list) the sweep of ``opts.space``."""
    from lipsweep.core.config_base import UsageError
    from lipsweep.core.paths import shown_path
    from lipsweep.core.ray_address import check_ray_address
    from lipsweep.core.storage import (
        experiment_path,
        is_remote,
        resolve_storage,
        storage_exists,
    )
    from lipsweep.search.space import space_spec
    from lipsweep.search.space_record import check_resume_space
    from lipsweep.sweep.driver import (
        SweepLock,
        build_callbacks,
        dry_run_lines,
        owner_id,
        run_sweep,
    )
    from lipsweep.sweep.signals import StopSignals
    from lipsweep.tracking import check_tracking_uri, redact_uri

    spec = space_spec(opts.space)
    preflight(spec)
    experiment = opts.experiment or spec.name
    check_experiment_name(experiment)
    storage = resolve_storage(opts.storage)  # checked once, here
    check_tracking_uri(opts.tracking_uri, must_exist=False)
    exp_path = experiment_path(storage, experiment)
    shown_uri = redact_uri(opts.tracking_uri)
    result = dict(
        space=spec.path,
        experiment=experiment,
        storage=storage,
        experiment_path=exp_path,
        tracking_uri=shown_uri,
    )
    if opts.dry_run:
        n = spec.num_trials
        counts = OutcomeCounts(finished=0, stopped=0, failed=0, not_run=n, total=n)
        return SweepResult(**result, counts=counts, ok=True, planned=tuple(dry_run_lines(spec)))
    # the space's Tune callbacks, imported and built (Ray) before anything is written
    extra_callbacks = build_callbacks(spec)
    if opts.ray_address:  # the one TCP probe of an explicit address, before the first write
        check_ray_address(opts.ray_address)
    owner = owner_id()
    # The first write: the experiment's lock, held until this process ends. Only its holder
    # decides whether the sweep exists (so two drivers started together cannot both start it).
    lock = None if is_remote(storage) else SweepLock(storage, experiment, owner)
    try:
        exists = storage_exists(exp_path)
        if opts.resume and not exists:
            raise UsageError(
                f"--resume: no sweep {experiment!r} at {exp_path}; check "
                "--storage and --experiment, or drop --resume to start it"
            )
        if not opts.resume and exists:
            raise UsageError(
                f"sweep {experiment!r} already exists at {exp_path}; pass "
                "--resume to continue it, or choose another --experiment / "
                "--storage"
            )
        if opts.resume:  # the one rule for an edited space: any change exits 2, named
            check_resume_space(spec, storage, experiment)
        elif spec.search is not None and spec.search.lazy:  # its study is kept across sweeps
            from lipsweep.search.searchers.study import check_new_study, study_db

            check_new_study(study_db(opts.tracking_uri, storage, experiment), experiment)
        driver_opts = opts.resolved(experiment, storage)
        _log.info(
            "sweep %r: %d trials -> storage %s, MLflow %s",
            experiment,
            spec.num_trials,
            storage if is_remote(storage) else shown_path(storage),
            shown_uri,
        )
        with StopSignals() as stop:
            try:
                outcome = run_sweep(
                    spec, driver_opts, stop, extra_callbacks, owner=owner, locked=lock is not None
                )
            except KeyboardInterrupt:  # a signal while Ray or the parent run was starting
                outcome = None
    finally:
        if lock is not None:
            lock.release()
    trials = outcome.trials if outcome is not None else []
    runs = tuple(
        TrialRun(t.trial_id, t.run_id, t.label, t.status, t.reason, dict(t.metrics))
        for t in sorted(trials, key=lambda t: t.trial_id)
    )
    return SweepResult(
        **result,
        counts=_counts(trials, spec.num_trials),
        parent_run_id=outcome.parent_run_id if outcome is not None else None,
        runs=runs,
        ok=outcome is not None and outcome.ok and not outcome.interrupted,
        interrupted=outcome is None or outcome.interrupted,
        signal=None if stop.received is None else int(stop.received),
        summary=outcome.summary if outcome is not None else "interrupted",
        ran=outcome.ran if outcome is not None else None,
    )
