"""``confirm``: re-check a sweep's front with standard AutoAttack (see lipsweep.decide.confirm)."""

from __future__ import annotations

import logging

from lipsweep.api._decide import reading
from lipsweep.api.options import ConfirmOptions
from lipsweep.api.results import ConfirmedRun, ConfirmResult, FailedRun

_log = logging.getLogger("lipsweep.confirm")


def confirm(opts: ConfirmOptions) -> ConfirmResult:
    with reading(opts.tracking_uri):
        return _confirm(opts)


def _confirm(opts: ConfirmOptions) -> ConfirmResult:
    from lipsweep.decide.confirm import (
        ITERS_ENV,
        ConfirmJob,
        budget_iters,
        choose_runs,
        confirm_metric,
        is_confirmed,
        log_outcome,
        request_key,
        reranked_table,
        run_eps,
        run_local,
    )
    from lipsweep.decide.confirm_state import forget, state_root
    from lipsweep.decide.sweep_runs import read_tracker
    from lipsweep.sweep.ray_confirm import run_ray

    if opts.ray_address:
        from lipsweep.core.ray_address import check_ray_address

        check_ray_address(opts.ray_address, flag="--ray-address")  # before any MLflow or Ray work
    else:
        state_root()  # a bad $LIPSWEEP_CONFIRM_STATE is refused before any work (exit 2)
    iters = budget_iters()
    request = request_key(opts.images, iters)
    tracker = read_tracker(opts.tracking_uri, opts.experiment)
    run_ids = choose_runs(tracker, opts.experiment, opts.run_id, opts.top)
    jobs, skipped = [], []
    for rid in run_ids:
        run = tracker.get_run(rid)
        eps = run_eps(run.data.params)
        label = f"run {rid[:8]} ({run.info.run_name or rid})"
        if is_confirmed(run, eps, request):
            skipped.append(rid)
            _log.info(
                "%s: skipped, already confirmed (%s: %s)",
                label,
                request,
                ", ".join(
                    f"{confirm_metric(e)}={run.data.metrics[confirm_metric(e)]:.2f}" for e in eps
                ),
            )
            continue
        jobs.append(ConfirmJob(rid, label, eps))
    _log.info(
        "confirming %d runs with %s AutoAttack (%s), %d already confirmed",
        len(jobs),
        "standard" if iters is None else f"REDUCED test-only ({ITERS_ENV}={iters})",
        request,
        len(skipped),
    )
    runner = (
        run_ray(tracker, jobs, opts.images, iters, opts.ray_address)
        if opts.ray_address
        else run_local(tracker, jobs, opts.images, iters)
    )
    confirmed, failed = [], []
    for job, out, err in runner:
        if err is not None or out is None:
            failed.append(FailedRun(job.run_id, job.label, f"{type(err).__name__}: {err}"))
            _log.error(
                "%s: confirm failed: %s: %s (the other runs go on; rerun confirm to retry it)",
                job.label,
                type(err).__name__,
                err,
            )
            continue
        log_outcome(tracker, job.run_id, out)
        forget(job.run_id)  # the result is recorded: its chunks are no longer needed
        _log.info(
            "%s: %s on %d images in %.0f s",
            job.label,
            ", ".join(f"{k}={v:.2f}" for k, v in out.metrics.items()),
            out.n_images,
            out.seconds,
        )
        confirmed.append(
            ConfirmedRun(job.run_id, job.label, dict(out.metrics), out.n_images, out.seconds)
        )
    return ConfirmResult(
        experiment=opts.experiment,
        request=request,
        confirmed=tuple(confirmed),
        skipped=tuple(skipped),
        failed=tuple(failed),
        table=reranked_table(tracker),
    )
