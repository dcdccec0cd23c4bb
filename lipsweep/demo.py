"""``lipsweep demo``: the embedded default end to end (smoke sweep, pareto, export).

It is exactly what a researcher runs on a cluster, at laptop size: the same ``sweep``,
``pareto`` and ``export`` commands, on a local Ray instance, a SQLite MLflow store in the
working folder, a tiny ViT and the CIFAR-10 sample shipped in the package. A rerun resumes
the same sweep instead of starting a second one.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def smoke_space_path() -> Path:
    """``search_spaces/smoke.yaml`` of the checkout (an installed package passes --space)."""
    repo = Path(__file__).resolve().parents[1] / "search_spaces" / "smoke.yaml"
    if not repo.is_file():
        from lipsweep.config_base import UsageError

        raise UsageError("--space: no search_spaces/smoke.yaml next to the package; pass "
                         "--space PATH")
    return repo


def run_demo(args: argparse.Namespace) -> int:
    from lipsweep.__main__ import build_parser
    from lipsweep.decide.commands import run_export_command, run_pareto_command
    from lipsweep.sweep.cli import resolve_storage, run_sweep_command
    from lipsweep.sweep.driver import experiment_path, storage_exists

    space = args.space or str(smoke_space_path())
    storage = resolve_storage(args.storage)
    resume = storage_exists(experiment_path(storage, args.experiment))
    parser = build_parser()
    common = ["--experiment", args.experiment, "--tracking-uri", args.tracking_uri]
    t0 = time.perf_counter()
    sweep_argv = ["sweep", space, "--storage", storage, *common]
    if resume:
        sweep_argv.append("--resume")
    if args.num_cpus:
        sweep_argv += ["--num-cpus", str(args.num_cpus)]
    rc = run_sweep_command(parser.parse_args(sweep_argv))
    if rc != 0:
        sys.stdout.write("demo: the sweep did not finish every trial; see above\n")
        return rc
    t_sweep = time.perf_counter() - t0
    sys.stdout.write("\n== Pareto front ==\n")
    run_pareto_command(parser.parse_args(["pareto", *common]))
    sys.stdout.write("\n== Export ==\n")
    run_export_command(parser.parse_args(["export", *common, "--out", args.out, "--force"]))
    from lipsweep.tracking import redact_uri

    uri = redact_uri(args.tracking_uri)  # shown, so without user:password@
    sys.stdout.write(f"""
== Where to look ==
sweep: {t_sweep:.0f} s; Ray Tune state in {experiment_path(storage, args.experiment)}
MLflow UI:  mlflow ui --backend-store-uri {uri} --host 127.0.0.1 --port 5000
            then open http://127.0.0.1:5000 -> experiment '{args.experiment}'
export:     {Path(args.out).resolve()}  (load with lipsweep.load_exported(...))
""")
    return 0
