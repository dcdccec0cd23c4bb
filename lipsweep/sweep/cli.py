"""``lipsweep sweep``: validate everything first, then start Ray; exit 0 only if all finished."""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from lipsweep.config_base import ConfigError

if TYPE_CHECKING:
    from lipsweep.sweep.space import SweepSpec

_log = logging.getLogger("lipsweep.sweep")


def default_storage() -> str:
    return os.environ.get("LIPSWEEP_STORAGE", str(Path("ray_results").resolve()))


def resolve_storage(raw: str | None) -> str:
    storage = raw or default_storage()
    if "://" not in storage:
        storage = str(Path(storage).expanduser().resolve())
    return storage


def preflight(spec: "SweepSpec") -> None:
    """Data and device checks the driver can make before Ray starts (ConfigError: exit 2)."""
    from lipsweep.data_remote import check_sweep_download
    from lipsweep.device import check_sweep_device

    trials = spec.trials or [spec.fixed]
    check_sweep_download(spec.num_trials, trials)
    check_sweep_device(spec.resources.gpu, trials)


def run_sweep_command(args: argparse.Namespace) -> int:
    from lipsweep.config_base import UsageError
    from lipsweep.sweep.driver import (SweepOptions, dry_run_lines, experiment_path, run_sweep,
                                       storage_exists)
    from lipsweep.sweep.space import load_space

    spec = load_space(args.space)
    preflight(spec)
    if args.max_concurrent_trials is not None and args.max_concurrent_trials < 1:
        raise ConfigError("--max-concurrent-trials", f"must be >= 1, got "
                          f"{args.max_concurrent_trials}")
    experiment = args.experiment or spec.name
    if args.dry_run:
        sys.stdout.write("\n".join(dry_run_lines(spec)) + "\n")
        return 0
    storage = resolve_storage(args.storage)
    exp_path = experiment_path(storage, experiment)
    exists = storage_exists(exp_path)
    if args.resume and not exists:
        raise UsageError(f"--resume: no sweep {experiment!r} at {exp_path}; check --storage "
                         "and --experiment, or drop --resume to start it")
    if not args.resume and exists:
        raise UsageError(f"sweep {experiment!r} already exists at {exp_path}; pass --resume "
                         "to continue it, or choose another --experiment / --storage")
    opts = SweepOptions(experiment=experiment, storage=storage,
                        tracking_uri=args.tracking_uri, resume=args.resume,
                        max_concurrent_trials=args.max_concurrent_trials,
                        ray_address=args.ray_address, num_cpus=args.num_cpus,
                        status_every=args.status_every, dashboard=args.dashboard)
    _log.info("sweep %r: %d trials -> storage %s, MLflow %s", experiment, spec.num_trials,
              storage, args.tracking_uri)
    outcome = run_sweep(spec, opts)
    if outcome.interrupted:
        sys.stdout.write(f"sweep interrupted; resume with: lipsweep sweep {args.space} "
                         f"--experiment {experiment} --storage {storage} --resume\n")
        return 130
    sys.stdout.write(outcome.summary + "\n")
    sys.stdout.write(f"MLflow parent run {outcome.parent_run_id} in experiment {experiment!r}"
                     f" ({args.tracking_uri})\n")
    return 0 if outcome.ok else 1
