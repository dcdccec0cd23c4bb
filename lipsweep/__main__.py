"""The ``lipsweep`` command line: train, sweep, pareto, export, demo, models.

Each subcommand maps to one ``cmd_*`` function in :data:`COMMANDS` (a test checks the map
against the parser). Usage and configuration errors exit with status 2 and one line naming the
offending field or flag; configuration is validated before anything is started or written.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from lipsweep.config_base import ConfigError, UsageError

_log = logging.getLogger("lipsweep")

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
EXIT_USAGE = 2


def _add_tracking(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI",
                                                             DEFAULT_TRACKING_URI),
                   help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or a SQLite store "
                        "mlflow.db in the working folder)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lipsweep", description="Sweeps of attention regularizers for robust ViTs "
        "(Ray Tune + MLflow).")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("train", help="train and evaluate one trial, without Ray or MLflow")
    p.add_argument("config", nargs="?", help="flat YAML of trial settings")
    p.add_argument("--out", default="runs/train", help="output folder (checkpoints, "
                   "metrics.json, artifacts); rerunning resumes from its last checkpoint")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one setting (repeatable), e.g. --set epochs=3")
    p.add_argument("--help-settings", action="store_true", help="list every setting and exit")
    _add_tracking(p)

    p = sub.add_parser("sweep", help="run a sweep on Ray Tune, logging to MLflow")
    p.add_argument("space", help="search-space YAML (see search_spaces/)")
    p.add_argument("--experiment", help="MLflow experiment / sweep name (default: the YAML's "
                   "`name`)")
    p.add_argument("--storage", help="Ray Tune storage path (local folder, NFS or s3://); "
                   "default: $LIPSWEEP_STORAGE or ./ray_results")
    p.add_argument("--resume", action="store_true", help="continue the interrupted sweep "
                   "from its storage path")
    p.add_argument("--max-concurrent-trials", type=int, default=None,
                   help="cap on trials running at once")
    p.add_argument("--dry-run", action="store_true", help="list the trials and exit "
                   "without starting Ray")
    p.add_argument("--ray-address", default=os.environ.get("RAY_ADDRESS"),
                   help="connect to this Ray cluster (default: $RAY_ADDRESS or a local one)")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray instance")
    _add_tracking(p)

    p = sub.add_parser("pareto", help="mark the Pareto-optimal trials of a sweep")
    p.add_argument("--experiment", required=True, help="MLflow experiment of the sweep")
    p.add_argument("--objective", action="append", default=None, metavar="NAME:max|min",
                   help="objective (repeatable); default acc_clean:max acc_pgd_4:max "
                        "acc_aa_2:max lip_jacobian_median:min")
    _add_tracking(p)

    p = sub.add_parser("export", help="export a trial's checkpoint as a self-describing folder")
    p.add_argument("--experiment", required=True, help="MLflow experiment of the sweep")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--run-id", help="export this child run (default: pick by --select)")
    p.add_argument("--select", default=None, help="selection rule on the front, e.g. "
                   "'pgd4-within-clean:1.0' (default) or 'max:acc_aa_2'")
    p.add_argument("--objective", action="append", default=None, metavar="NAME:max|min",
                   help="objectives defining the front (as for pareto)")
    p.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
    p.add_argument("--register", metavar="MODEL_NAME", default=None,
                   help="also register the export in the MLflow model registry")
    _add_tracking(p)

    p = sub.add_parser("demo", help="the embedded default end to end: smoke sweep, pareto, "
                       "export")
    p.add_argument("--space", default=None, help="search space (default: smoke.yaml)")
    p.add_argument("--experiment", default="smoke", help="experiment name")
    p.add_argument("--out", default="exports/smoke-best", help="export folder")
    p.add_argument("--storage", default=None, help="Ray Tune storage path")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray instance")
    _add_tracking(p)

    p = sub.add_parser("models", help="list the timm ViT architectures lipsweep can build")
    _add_tracking(p)
    return parser


def cmd_train(args: argparse.Namespace) -> int:
    from lipsweep.config import TrialConfig, parse_override, settings_help

    if args.help_settings:
        sys.stdout.write(settings_help() + "\n")
        return 0
    overrides = dict(parse_override(o) for o in args.overrides)
    if args.config:
        cfg = TrialConfig.from_yaml(args.config, overrides)
    else:
        cfg = TrialConfig.from_flat(overrides, source="--set")
    cfg.model.validate_name()
    from lipsweep.trial import run_trial

    out = Path(args.out)
    _log.info("training %s on %s, regularizer %s, %d epochs -> %s", cfg.model.model,
              cfg.data.dataset, cfg.regularizer.regularizer, cfg.optim.epochs, out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(cfg.to_json())
    result = run_trial(cfg, out)
    keys = [k for k in ("acc_clean", "acc_fgsm_2", "acc_fgsm_4", "acc_pgd_2", "acc_pgd_4",
                        "acc_aa_2", "lip_jacobian_median") if k in result.metrics]
    sys.stdout.write("  ".join(f"{k}={result.metrics[k]:.2f}" for k in keys) + "\n")
    sys.stdout.write(f"metrics: {out / 'metrics.json'}\n")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from lipsweep.sweep.cli import run_sweep_command

    return run_sweep_command(args)


def cmd_pareto(args: argparse.Namespace) -> int:
    from lipsweep.review import run_pareto_command

    return run_pareto_command(args)


def cmd_export(args: argparse.Namespace) -> int:
    from lipsweep.review import run_export_command

    return run_export_command(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from lipsweep.demo import run_demo

    return run_demo(args)


def cmd_models(args: argparse.Namespace) -> int:
    from lipsweep.models import list_vit_models

    sys.stdout.write("\n".join(list_vit_models()) + "\n")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "train": cmd_train,
    "sweep": cmd_sweep,
    "pareto": cmd_pareto,
    "export": cmd_export,
    "demo": cmd_demo,
    "models": cmd_models,
}


def _redact_record(record: logging.LogRecord) -> bool:
    from lipsweep.tracking import redact_uri

    if "@" in (text := record.getMessage()):
        record.msg, record.args = redact_uri(text), None
    return True


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S", stream=sys.stderr)
    for handler in logging.getLogger().handlers:  # no user:password@ of a URI in any log line
        handler.addFilter(_redact_record)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as err:
        sys.stderr.write(f"lipsweep {args.command}: error: {err.format()}\n")
        return EXIT_USAGE
    except UsageError as err:
        sys.stderr.write(f"lipsweep {args.command}: error: {err}\n")
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
