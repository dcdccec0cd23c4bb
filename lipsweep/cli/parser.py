"""The ``lipsweep`` command line's parser: every subcommand, its flags, help texts and one
example (:func:`build_parser`); the commands themselves are in :mod:`lipsweep.cli.commands`."""

from __future__ import annotations

import argparse
import sys

from lipsweep.api._train import TRAIN_MARKER
from lipsweep.api.options import TRAIN_OUT
from lipsweep.core.options import default_ray_address, default_tracking_uri
from lipsweep.core.version import __version__


def _add_tracking(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tracking-uri",
        default=default_tracking_uri(),
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or a SQLite store "
        "mlflow.db in the working folder)",
    )


# One example per subcommand, shown at the end of its --help.
EXAMPLES = {
    "train": "lipsweep train tiny --out runs/tiny --set epochs=3",
    "sweep": "lipsweep sweep smoke --status-every 60",
    "pareto": "lipsweep pareto --experiment smoke --tracking-uri sqlite:///mlflow.db",
    "export": "lipsweep export --experiment smoke --out exports/smoke-best",
    "report": "lipsweep report --experiment smoke --out reports/smoke",
    "confirm": "lipsweep confirm --experiment smoke --top 3 --images 1000",
    "demo": "lipsweep demo --num-cpus 2",
    "models": "lipsweep models",
    "spaces": "lipsweep spaces",
    "data": "lipsweep data prepare --dataset cifar100 --source ~/cifar --dest s3://bucket/data",
    "bench-search": "lipsweep bench-search --table benchmarks/data/tiny_grid.csv "
    "--objective acc_clean:max --objective acc_pgd_4:max --objective lip_jacobian_median:min",
}


def _add_command(
    sub, name: str, help_text: str, common: argparse.ArgumentParser
) -> argparse.ArgumentParser:
    """A subcommand with a description, one example, and the global flags (-v) anywhere."""
    return sub.add_parser(
        name,
        help=help_text,
        description=help_text[:1].upper() + help_text[1:] + ".",
        epilog=f"example:\n  {EXAMPLES[name]}",
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _seconds(text: str) -> float:
    """argparse type: a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}")
    return value


class _DeprecatedAlias(argparse.Action):
    """An old flag spelling: stores into the new flag's ``dest`` and says so on stderr."""

    def __init__(self, option_strings, dest, new: str, **kwargs) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        sys.stderr.write(f"lipsweep: {option_string} is deprecated; use {self.new}\n")
        setattr(namespace, self.dest, values)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lipsweep",
        description="Sweeps of attention regularizers for robust ViTs (Ray Tune + MLflow).",
        epilog="example:\n  lipsweep demo",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"lipsweep {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    # the same flag after the subcommand; SUPPRESS keeps a flag given before it
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = _add_command(sub, "train", "train and evaluate one trial, without Ray or MLflow", common)
    p.add_argument(
        "config",
        nargs="?",
        help="flat YAML of trial settings, or a shipped config's name (tiny)",
    )
    p.add_argument(
        "--out",
        default=TRAIN_OUT,
        help="output folder (checkpoints, "
        "metrics.json, artifacts); rerunning with the same config resumes from "
        "its last checkpoint, a different config is refused",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="delete --out first and start over (e.g. after changing the config); only a "
        "folder an earlier `lipsweep train` made (it holds " + TRAIN_MARKER + ") is deleted",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting (repeatable), e.g. --set epochs=3",
    )
    p.add_argument("--help-settings", action="store_true", help="list every setting and exit")

    p = _add_command(sub, "sweep", "run a sweep on Ray Tune, logging to MLflow", common)
    p.add_argument(
        "space", help="search-space YAML, or a shipped space's name (see `lipsweep spaces`)"
    )
    p.add_argument(
        "--experiment", help="MLflow experiment / sweep name (default: the YAML's `name`)"
    )
    p.add_argument(
        "--storage",
        help="Ray Tune storage path (local folder, NFS or s3://); "
        "default: $LIPSWEEP_STORAGE or ./ray_results",
    )
    p.add_argument(
        "--resume", action="store_true", help="continue the interrupted sweep from its storage path"
    )
    p.add_argument(
        "--max-concurrent-trials", type=int, default=None, help="cap on trials running at once"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="list the trials and exit without starting Ray"
    )
    p.add_argument(
        "--ray-address",
        default=default_ray_address(),
        help="connect to this Ray cluster (default: $RAY_ADDRESS or a local one)",
    )
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray instance")
    p.add_argument(
        "--status-every",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="print the status block (running/pending/finished, ETA, best trial) "
        "this often, and at each trial end (default 30; 0: trial ends only)",
    )
    p.add_argument(
        "--dashboard",
        action="store_true",
        help="start the Ray dashboard of a "
        "local Ray instance on 127.0.0.1 (its address is printed)",
    )
    _add_tracking(p)

    p = _add_command(sub, "pareto", "mark the Pareto-optimal trials of a sweep", common)
    p.add_argument("--experiment", required=True, help="MLflow experiment of the sweep")
    p.add_argument(
        "--objective",
        action="append",
        default=None,
        metavar="NAME:max|min",
        help="objective (repeatable); default acc_clean:max acc_pgd_4:max "
        "acc_aa_2:max lip_jacobian_median:min",
    )
    p.add_argument(
        "--per-run",
        action="store_true",
        help="rank single runs even when an arm "
        "(configs that differ only in seed) has 2 or more seeds",
    )
    _add_tracking(p)

    p = _add_command(
        sub, "export", "export a trial's checkpoint as a self-describing folder", common
    )
    p.add_argument("--experiment", required=True, help="MLflow experiment of the sweep")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--run-id", help="export this child run (default: pick by --select)")
    p.add_argument(
        "--select",
        default=None,
        help="selection rule on the front, e.g. "
        "'pgd4-within-clean:1.0' (default) or 'max:acc_aa_2'",
    )
    p.add_argument(
        "--objective",
        action="append",
        default=None,
        metavar="NAME:max|min",
        help="objectives defining the front (as for pareto)",
    )
    p.add_argument(
        "--per-run",
        action="store_true",
        help="select among single runs even when an arm has 2 or more seeds (as for pareto)",
    )
    p.add_argument("--force", action="store_true", help="replace a previous export in --out")
    p.add_argument(
        "--register",
        metavar="MODEL_NAME",
        default=None,
        help="also register the export in the MLflow model registry",
    )
    _add_tracking(p)

    p = _add_command(
        sub,
        "report",
        "write a markdown report of a sweep's arms (mean ± std, paired differences to the "
        "baseline with Holm-corrected tests, the seeds each effect needs, figures) and log "
        "it to the parent run",
        common,
    )
    p.add_argument("--experiment", required=True, help="MLflow experiment of the sweep")
    p.add_argument(
        "--out",
        default=None,
        help="output folder, made with its parents (default: reports/EXPERIMENT)",
    )
    p.add_argument(
        "--objective",
        action="append",
        default=None,
        metavar="NAME:max|min",
        help="objectives of the Pareto figure (as for pareto)",
    )
    _add_tracking(p)

    p = _add_command(
        sub,
        "confirm",
        "re-evaluate the front's runs with standard AutoAttack (logs acc_aa_std_<eps>)",
        common,
    )
    p.add_argument("--experiment", required=True, help="MLflow experiment of the sweep")
    p.add_argument(
        "--top",
        type=int,
        default=None,
        metavar="N",
        help="the N best by Pareto rank: arms (every run of each) when an arm has 2 or more "
        "seeds, as pareto ranks them, else runs (default: the front)",
    )
    p.add_argument(
        "--run-id",
        action="extend",
        nargs="+",
        default=None,
        metavar="ID",
        help="confirm these child runs instead of the front",
    )
    p.add_argument(
        "--images",
        type=int,
        default=0,
        metavar="N",
        help="test images: the "
        "seeded subset of N (default 0: the whole test split of the run's data)",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="RAY_ADDRESS",
        help="run each run's "
        "evaluation as a Ray task on this cluster (a GPU each if it has GPUs); "
        "default: locally, one run after the other, without Ray",
    )
    p.add_argument(
        "--address", dest="ray_address", action=_DeprecatedAlias, new="--ray-address",
        help=argparse.SUPPRESS,
    )  # fmt: skip
    _add_tracking(p)

    p = _add_command(
        sub, "demo", "the embedded default end to end: smoke sweep, pareto, export", common
    )
    p.add_argument(
        "--space", default=None, help="search space, a path or a shipped name (default: smoke)"
    )
    p.add_argument("--experiment", default="smoke", help="experiment name")
    p.add_argument("--out", default=None, help="export folder (default: exports/smoke-best)")
    p.add_argument("--storage", default=None, help="Ray Tune storage path")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray instance")
    _add_tracking(p)

    # no --tracking-uri: it lists timm's ViTs and never touches MLflow (docs/contract.md)
    _add_command(sub, "models", "list the timm ViT architectures lipsweep can build", common)
    # no --tracking-uri either: it reads the package's own files
    _add_command(
        sub, "spaces", "list the search spaces shipped with lipsweep (sweep NAME runs one)", common
    )

    _add_data_parser(sub, common)
    _add_bench_search_parser(sub, common)
    return parser


def _add_bench_search_parser(
    sub: argparse._SubParsersAction, common: argparse.ArgumentParser
) -> None:
    """``lipsweep bench-search``: replay search methods on a recorded grid."""
    p = _add_command(
        sub, "bench-search", "replay search methods on a recorded grid: hypervolume per compute",
        common,
    )  # fmt: skip
    p.add_argument("--table", required=True, help="recorded grid (CSV, benchmarks/data/)")
    p.add_argument(
        "--objective", action="append", default=[], metavar="NAME:max|min",
        help="objective of the front, a final column (repeatable; at least one)",
    )  # fmt: skip
    p.add_argument(
        "--stop-on", action="append", default=[], metavar="NAME:max|min",
        help="per-epoch column moasha stops on (repeatable); default: each objective's "
        "per-epoch counterpart (probe_<name> for a final-only objective)",
    )  # fmt: skip
    p.add_argument(
        "--budget", type=float, default=0.4,
        help="compute budget, a fraction of the whole grid's worker-seconds (default 0.4)",
    )  # fmt: skip
    p.add_argument("--replays", type=int, default=10, help="replays per method (default 10)")
    p.add_argument("--workers", type=int, default=4, help="simulated workers (default 4)")
    p.add_argument(
        "--grace-period", type=int, default=1,
        help="epochs before asha-clean, moasha, optuna-moasha and syne-moasha may stop a trial "
        "(their first rung; default 1)",
    )  # fmt: skip
    p.add_argument(
        "--reduction-factor", type=int, default=2,
        help="their rung spacing; each rung promotes 1/reduction-factor (>= 2; default 2)",
    )  # fmt: skip
    p.add_argument(
        "--confidence", type=float, default=0.8,
        help="moasha's confidence that the configurations ahead of one it stops are ahead "
        "beyond seed noise, in (0, 1) (default 0.8)",
    )  # fmt: skip
    p.add_argument(
        "--method", action="append", default=[],
        help="method to replay (repeatable): any registered searcher, SEARCHER+SCHEDULER "
        "(plugins included, e.g. random+moasha), or asha-clean, moasha, optuna-moasha, "
        "syne-moasha; default: grid, random, optuna-tpe, optuna-nsga2, asha-clean, moasha, "
        "optuna-moasha, and syne-moasha where Syne Tune imports (the bench extra)",
    )  # fmt: skip
    p.add_argument("--out", default="bench-search", help="folder for summary.json and the plot")


def _add_data_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """``lipsweep data prepare``: pack CIFAR once into a verified file for every worker."""
    p = _add_command(sub, "data", "prepare a dataset once for a cluster (data prepare)", common)
    actions = p.add_subparsers(dest="data_command", metavar="ACTION")
    actions.required = True
    q = actions.add_parser(
        "prepare",
        help="pack CIFAR into DEST/<dataset>.npz + manifest "
        "(sha256); trials then use data_dir: DEST/<dataset>.npz",
    )
    q.add_argument("--dataset", required=True, choices=["cifar10", "cifar100"])
    q.add_argument(
        "--source",
        required=True,
        help="a torchvision CIFAR root folder (the one "
        "holding cifar-10-batches-py / cifar-100-python) or an .npz with x_train, "
        "y_train, x_test, y_test",
    )
    q.add_argument(
        "--dest",
        required=True,
        help="folder or URI (s3://bucket/prefix, gs://..., "
        "file:///shared/data) that every worker can read",
    )
    q.add_argument(
        "--download",
        action="store_true",
        help="let torchvision download CIFAR into --source first (on this machine)",
    )
