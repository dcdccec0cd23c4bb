"""The ``lipsweep`` command line: train, sweep, pareto, export, confirm, demo, models, spaces.

Each subcommand maps to one ``cmd_*`` function in :data:`COMMANDS` (a test checks the map
against the parser). Usage and configuration errors exit with status 2 and one line naming the
offending field or flag; configuration is validated before anything is started or written.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from lipsweep.api._train import TRAIN_MARKER
from lipsweep.api.options import TRAIN_OUT, default_ray_address, default_tracking_uri
from lipsweep.core.config_base import ConfigError, UsageError
from lipsweep.core.redact import redact_uri
from lipsweep.core.version import __version__

if TYPE_CHECKING:
    from lipsweep.api import ExportResult, ParetoResult, SweepResult

_log = logging.getLogger("lipsweep")

EXIT_USAGE = 2
EXIT_FAILURE = 1


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
    p.add_argument("--out", default=None, help="output folder (default: reports/EXPERIMENT)")
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
        "--method", action="append", default=[],
        help="method to replay (repeatable; default all: grid, random, optuna-tpe, "
        "optuna-nsga2, asha-clean, moasha, optuna-moasha, and syne-moasha where Syne Tune "
        "imports: the bench extra)",
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


def cmd_data(args: argparse.Namespace) -> int:
    from lipsweep.data.remote import MANIFEST_SUFFIX, prepare

    m = prepare(args.dataset, Path(args.source).expanduser(), args.dest, args.download)
    dest = args.dest.rstrip("/")
    sys.stdout.write(
        f"{dest}/{m.file}  ({m.train} train / {m.test} test images, "
        f"{m.bytes / 1e6:.1f} MB, sha256 {m.sha256})\n"
        f"manifest: {dest}/{m.file}{MANIFEST_SUFFIX}\n"
        f"use it in a space: dataset: {m.dataset}, data_dir: {dest}/{m.file}\n"
    )
    return 0


def _options(cls: type, args: argparse.Namespace) -> Any:
    """The command's options dataclass from its parsed flags (a field per flag, same name)."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def cmd_train(args: argparse.Namespace) -> int:
    from lipsweep import api

    if args.help_settings:
        from lipsweep.settings.config import settings_help

        _out(settings_help())
        return 0
    result = api.train(_options(api.TrainOptions, args))
    from lipsweep.core.metric_names import SUMMARY_METRICS

    keys = [k for k in SUMMARY_METRICS if k in result.metrics]
    _out("  ".join(f"{k}={result.metrics[k]:.2f}" for k in keys))
    _out(f"metrics: {result.metrics_file}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from lipsweep import api

    return print_sweep(api.sweep(_options(api.SweepOptions, args)))


def print_sweep(result: "SweepResult") -> int:
    """What ``lipsweep sweep`` prints, and its exit status: 0 only if every trial finished
    (or was stopped early by the scheduler); 1 if one failed; 128 + N after signal N."""
    import signal

    from lipsweep.sweep.signals import exit_code

    if result.planned:
        _out("\n".join(result.planned))
        return 0
    if result.interrupted:
        _out(
            f"sweep interrupted; resume with: lipsweep sweep {result.space} --experiment "
            f"{result.experiment} --storage {result.storage} --resume"
        )
        return exit_code(result.signal or signal.SIGINT)
    _out(result.summary)
    _out(
        f"MLflow parent run {result.parent_run_id} in experiment {result.experiment!r} "
        f"({result.tracking_uri})"
    )
    if result.signal:  # arrived while the runs were being closed: the sweep is complete
        return exit_code(result.signal)
    return 0 if result.ok else EXIT_FAILURE


def cmd_pareto(args: argparse.Namespace) -> int:
    from lipsweep import api

    print_pareto(api.pareto(_options(api.ParetoOptions, args)))
    return 0


def print_pareto(result: "ParetoResult") -> None:
    _out(result.table)
    if result.pick is not None:
        _out(f"export pick ({result.pick.rule}): {result.pick.run_id} — {result.pick.explanation}")
    on_front = sum(r == 1 for r in result.ranks.values())
    _out(
        f"tagged {len(result.ranks)} runs (pareto=true on {on_front});"
        f" artifacts under pareto/ of parent run {result.parent_run_id}"
    )


def cmd_export(args: argparse.Namespace) -> int:
    from lipsweep import api

    print_export(api.export(_options(api.ExportOptions, args)))
    return 0


def print_export(result: "ExportResult") -> None:
    from lipsweep.core.metric_names import ACC_CLEAN, LIP_JACOBIAN_MEDIAN, attack_metric
    from lipsweep.decide.commands import CHAMPION

    keys = (ACC_CLEAN, attack_metric("pgd", 4), attack_metric("aa", 2), LIP_JACOBIAN_MEDIAN)
    m = result.metrics
    _out(f"exported run {result.run_id} ({result.selected_by}) to {result.folder}")
    _out("  " + "  ".join(f"{k}={m[k]:.2f}" for k in keys if k in m))
    if result.registered is not None:
        _out(
            f"registered {result.registered} (alias {CHAMPION}): "
            "mlflow.pyfunc.load_model(...).predict([0, 1] images) -> logits"
        )
        _out(f"  from logged model {result.logged_model}: the run's Models tab, with its metrics")


def cmd_report(args: argparse.Namespace) -> int:
    from lipsweep import api

    result = api.report(_options(api.ReportOptions, args))
    logged = ""
    if result.parent_run_id is not None:
        logged = f"; logged under report/ of parent run {result.parent_run_id}"
    _out(
        f"wrote {result.report} ({result.arms} arms, {result.runs} runs; "
        f"figures: {', '.join(p.name for p in result.figures)}){logged}"
    )
    return 0


def cmd_confirm(args: argparse.Namespace) -> int:
    from lipsweep import api

    result = api.confirm(_options(api.ConfirmOptions, args))
    _out(result.table)
    _out(
        f"confirmed {len(result.confirmed)} runs, skipped {len(result.skipped)} already "
        f"confirmed, {len(result.failed)} failed ({result.request})"
    )
    return 0 if result.ok else EXIT_FAILURE


def cmd_demo(args: argparse.Namespace) -> int:
    from lipsweep import api
    from lipsweep.api._demo import installed_tool
    from lipsweep.tracking import redact_uri

    opts = _options(api.DemoOptions, args)
    result = api.demo(opts)
    rc = print_sweep(result.sweep)
    if result.pareto is None or result.export is None:
        _out("demo: the sweep did not finish every trial; see above")
        return rc or EXIT_FAILURE
    _out("\n== Pareto front ==")
    print_pareto(result.pareto)
    _out("\n== Export ==")
    print_export(result.export)
    uri = redact_uri(opts.tracking_uri)  # shown, so without user:password@
    sys.stdout.write(f"""
== Where to look ==
sweep: {result.sweep_seconds:.0f} s; Ray Tune state in {result.sweep.experiment_path}
MLflow UI:  {installed_tool("mlflow")} ui --backend-store-uri {uri} --host 127.0.0.1 --port 5000
            then open http://127.0.0.1:5000 -> experiment '{opts.experiment}'
export:     {result.export.folder.resolve()}  (load with lipsweep.load_exported(...))
reruns:     the same seeds give these numbers again on this machine; another CPU or
            torch build sums in another order and trains to other numbers
""")
    return 0


def cmd_bench_search(args: argparse.Namespace) -> int:
    from lipsweep import api

    result = api.bench_search(_options(api.BenchSearchOptions, args))
    s = result.summary
    _out(
        f"{s['grid']['configurations']} configurations, {s['replays']} replays, "
        f"{s['workers']} workers; hypervolume fraction at {s['budget']:.0%} of the grid's "
        "compute, and the compute to reach 90% (medians)"
    )
    for name, m in s["methods"].items():
        hv = m["hv_fraction_at_budget"]["median"]
        to90 = m["compute_fraction_to_90"]["median"]
        _out(f"  {name:<14} {hv:6.3f}   " + ("never" if to90 is None else f"{to90:6.1%}"))
    _out(f"wrote {result.summary_path} and {result.plot}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from lipsweep.vit.models import list_vit_models

    sys.stdout.write("\n".join(list_vit_models()) + "\n")
    return 0


def cmd_spaces(args: argparse.Namespace) -> int:
    from lipsweep.core.shipped import space_descriptions

    rows = space_descriptions()
    width = max((len(name) for name, _ in rows), default=0)
    _out("\n".join(f"{name:<{width}}  {text}".rstrip() for name, text in rows))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "train": cmd_train,
    "sweep": cmd_sweep,
    "pareto": cmd_pareto,
    "export": cmd_export,
    "report": cmd_report,
    "confirm": cmd_confirm,
    "demo": cmd_demo,
    "models": cmd_models,
    "spaces": cmd_spaces,
    "data": cmd_data,
    "bench-search": cmd_bench_search,
}


def _redact_record(record: logging.LogRecord) -> bool:
    """No credential of a URI (userinfo or query, :func:`redact_uri`) in any log line."""
    text = record.getMessage()
    shown = redact_uri(text)
    if shown != text:
        record.msg, record.args = shown, None
    return True


def error_line(command: str, message: object) -> str:
    """The one line a failed command prints: credentials of URIs redacted, and every
    character that is not printable (a newline in a file name, a tab, an escape) written as
    ``repr`` writes it, so the message stays on one line and nothing in it can pass for
    lipsweep's own output."""
    text = "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
        for c in redact_uri(message)
    )
    return f"lipsweep {command}: error: {text}\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    from lipsweep.core.stdio import reader_gone_safe

    with reader_gone_safe():  # `lipsweep ... | head -1`: a closed stdout never kills the work
        return _main(argv)


def _main(argv: Optional[Sequence[str]]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    for handler in logging.getLogger().handlers:  # no credential of a URI in any log line
        handler.addFilter(_redact_record)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as err:
        sys.stderr.write(error_line(args.command, err.format()))
        return EXIT_USAGE
    except UsageError as err:
        sys.stderr.write(error_line(args.command, err))
        return EXIT_USAGE
    except OSError as err:  # WriteError (a full disk, ulimit -f: its temporary is gone), EIO
        _log.debug("write failed", exc_info=True)
        sys.stderr.write(error_line(args.command, err))
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
