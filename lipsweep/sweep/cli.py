"""``lipsweep sweep``: validate everything first, then start Ray; exit 0 only if all finished."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import TYPE_CHECKING

from lipsweep.core.config_base import ConfigError, show
from lipsweep.core.storage import resolve_storage

if TYPE_CHECKING:
    from lipsweep.sweep.space import SweepSpec

_log = logging.getLogger("lipsweep.sweep")


def preflight(spec: "SweepSpec") -> None:
    """Data and device checks the driver can make before Ray starts (ConfigError: exit 2)."""
    from lipsweep.trial.data_remote import check_sweep_download
    from lipsweep.trial.device import check_sweep_device

    trials = spec.trials or [spec.fixed]
    check_sweep_download(spec.num_trials, trials)
    check_sweep_device(spec.resources.gpu, trials)


def check_experiment_name(name: str) -> None:
    """``--experiment`` follows the rule of the space's ``name`` (letters, digits, - or _):
    it is a folder under --storage and part of MLflow filters, so no ``..``, ``/``, quotes."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError("--experiment", f"must be letters, digits, - or _, got {show(name)}")


def validate_sweep_options(args: argparse.Namespace, experiment: str) -> str:
    """Every option of ``lipsweep sweep``, checked before anything is written or started;
    returns the resolved storage (checked once, here)."""
    from lipsweep.core.ray_address import parse_ray_address
    from lipsweep.tracking import check_tracking_uri

    for flag, value in (
        ("--max-concurrent-trials", args.max_concurrent_trials),
        ("--num-cpus", args.num_cpus),
    ):
        if value is not None and value < 1:
            raise ConfigError(flag, f"must be >= 1, got {value}")
    check_experiment_name(experiment)
    storage = resolve_storage(args.storage)
    check_tracking_uri(args.tracking_uri, must_exist=False)
    if args.ray_address:
        parse_ray_address(args.ray_address)
    return storage


def run_sweep_command(args: argparse.Namespace) -> int:
    from lipsweep.core.config_base import UsageError
    from lipsweep.core.ray_address import check_ray_address
    from lipsweep.core.storage import experiment_path, is_remote, storage_exists
    from lipsweep.sweep.driver import (
        SweepLock,
        SweepOptions,
        dry_run_lines,
        owner_id,
        run_sweep,
    )
    from lipsweep.sweep.signals import StopSignals, exit_code
    from lipsweep.sweep.space import load_space
    from lipsweep.sweep.space_record import check_resume_space
    from lipsweep.tracking import redact_uri

    spec = load_space(args.space)
    preflight(spec)
    experiment = args.experiment or spec.name
    storage = validate_sweep_options(args, experiment)
    if args.dry_run:
        sys.stdout.write("\n".join(dry_run_lines(spec)) + "\n")
        return 0
    if args.ray_address:  # the one TCP probe of an explicit address, before the first write
        check_ray_address(args.ray_address)
    owner = owner_id()
    # The first write: the experiment's lock, held until this process ends. Only its holder
    # decides whether the sweep exists (so two drivers started together cannot both start it).
    lock = None if is_remote(storage) else SweepLock(storage, experiment, owner)
    try:
        exp_path = experiment_path(storage, experiment)
        exists = storage_exists(exp_path)
        if args.resume and not exists:
            raise UsageError(
                f"--resume: no sweep {experiment!r} at {exp_path}; check "
                "--storage and --experiment, or drop --resume to start it"
            )
        if not args.resume and exists:
            raise UsageError(
                f"sweep {experiment!r} already exists at {exp_path}; pass "
                "--resume to continue it, or choose another --experiment / "
                "--storage"
            )
        if args.resume:  # the one rule for an edited space: any change exits 2, named
            check_resume_space(spec, storage, experiment)
        opts = SweepOptions(
            experiment=experiment,
            storage=storage,
            tracking_uri=args.tracking_uri,
            resume=args.resume,
            max_concurrent_trials=args.max_concurrent_trials,
            ray_address=args.ray_address,
            num_cpus=args.num_cpus,
            status_every=args.status_every,
            dashboard=args.dashboard,
            owner=owner,
            locked=lock is not None,
        )
        shown_uri = redact_uri(args.tracking_uri)
        _log.info(
            "sweep %r: %d trials -> storage %s, MLflow %s",
            experiment,
            spec.num_trials,
            storage,
            shown_uri,
        )
        with StopSignals() as stop:
            try:
                outcome = run_sweep(spec, opts, stop)
            except KeyboardInterrupt:  # a signal while Ray or the parent run was starting
                outcome = None
    finally:
        if lock is not None:
            lock.release()
    resume_line = (
        f"sweep interrupted; resume with: lipsweep sweep {args.space} "
        f"--experiment {experiment} --storage {storage} --resume\n"
    )
    if outcome is None or outcome.interrupted:
        sys.stdout.write(resume_line)
        return exit_code(stop.received or signal.SIGINT)
    sys.stdout.write(outcome.summary + "\n")
    sys.stdout.write(
        f"MLflow parent run {outcome.parent_run_id} in experiment {experiment!r} ({shown_uri})\n"
    )
    if stop.received:  # arrived while the runs were being closed: the sweep is complete
        return exit_code(stop.received)
    return 0 if outcome.ok else 1
