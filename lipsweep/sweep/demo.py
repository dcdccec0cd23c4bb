"""``lipsweep demo``: the embedded default end to end (smoke sweep, pareto, export).

It is exactly what a researcher runs on a cluster, at laptop size: the same ``sweep``,
``pareto`` and ``export`` commands, on a local Ray instance, a SQLite MLflow store in the
working folder, a tiny ViT and the CIFAR-10 sample shipped in the package. A rerun resumes
the same sweep instead of starting a second one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Optional


def smoke_space_path() -> Path:
    """``search_spaces/smoke.yaml`` of the checkout (an installed package passes --space)."""
    repo = Path(__file__).resolve().parents[2] / "search_spaces" / "smoke.yaml"
    if not repo.is_file():
        from lipsweep.core.config_base import UsageError

        raise UsageError(
            "--space: no search_spaces/smoke.yaml next to the package; pass --space PATH"
        )
    return repo


def sweep_args(
    space: str,
    experiment: str,
    storage: str,
    tracking_uri: str,
    resume: bool,
    num_cpus: Optional[int],
) -> argparse.Namespace:
    """The options of ``lipsweep sweep SPACE --experiment E --storage S --tracking-uri U
    [--resume] [--num-cpus N]``, every other flag at its default (a test pins the parity)."""
    return argparse.Namespace(
        verbose=False,
        command="sweep",
        space=space,
        experiment=experiment,
        storage=storage,
        resume=resume,
        max_concurrent_trials=None,
        dry_run=False,
        ray_address=os.environ.get("RAY_ADDRESS"),
        num_cpus=num_cpus,
        status_every=30.0,
        dashboard=False,
        tracking_uri=tracking_uri,
    )


def pareto_args(experiment: str, tracking_uri: str) -> argparse.Namespace:
    """The options of ``lipsweep pareto --experiment E --tracking-uri U``."""
    return argparse.Namespace(
        verbose=False,
        command="pareto",
        experiment=experiment,
        objective=None,
        per_run=False,
        tracking_uri=tracking_uri,
    )


DEMO_OUT = "exports/smoke-best"
"""The demo's export folder unless --out names one (its parent is created)."""


def export_args(experiment: str, tracking_uri: str, out: str) -> argparse.Namespace:
    """The options of ``lipsweep export --experiment E --tracking-uri U --out O --force``."""
    return argparse.Namespace(
        verbose=False,
        command="export",
        experiment=experiment,
        out=out,
        run_id=None,
        select=None,
        objective=None,
        force=True,
        register=None,
        per_run=False,
        tracking_uri=tracking_uri,
    )


def run_demo(args: argparse.Namespace) -> int:
    from lipsweep.core.storage import experiment_path, resolve_storage, storage_exists
    from lipsweep.decide.commands import run_export_command, run_pareto_command
    from lipsweep.decide.export import check_out
    from lipsweep.sweep.cli import run_sweep_command

    space = args.space or str(smoke_space_path())
    out = args.out or DEMO_OUT
    check_out(out, force=True, make_parents=args.out is None)  # before the sweep, not after
    storage = resolve_storage(args.storage)
    resume = storage_exists(experiment_path(storage, args.experiment))
    t0 = time.perf_counter()
    rc = run_sweep_command(
        sweep_args(space, args.experiment, storage, args.tracking_uri, resume, args.num_cpus)
    )
    if rc != 0:
        sys.stdout.write("demo: the sweep did not finish every trial; see above\n")
        return rc
    t_sweep = time.perf_counter() - t0
    sys.stdout.write("\n== Pareto front ==\n")
    run_pareto_command(pareto_args(args.experiment, args.tracking_uri))
    sys.stdout.write("\n== Export ==\n")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    run_export_command(export_args(args.experiment, args.tracking_uri, out))
    from lipsweep.tracking import redact_uri

    uri = redact_uri(args.tracking_uri)  # shown, so without user:password@
    sys.stdout.write(f"""
== Where to look ==
sweep: {t_sweep:.0f} s; Ray Tune state in {experiment_path(storage, args.experiment)}
MLflow UI:  {installed_tool("mlflow")} ui --backend-store-uri {uri} --host 127.0.0.1 --port 5000
            then open http://127.0.0.1:5000 -> experiment '{args.experiment}'
export:     {Path(out).resolve()}  (load with lipsweep.load_exported(...))
reruns:     the same seeds give these numbers again on this machine; another CPU or
            torch build sums in another order and trains to other numbers
""")
    return 0


def installed_tool(name: str) -> str:
    """The command that runs ``name`` from this interpreter's environment in a new shell:
    ``.venv/bin/mlflow`` after ``make setup`` (whose bin folder is not on the PATH)."""
    tool = Path(sys.executable).parent / name
    if not tool.is_file():
        return name
    try:
        return str(tool.relative_to(Path.cwd()))
    except ValueError:
        return str(tool)
