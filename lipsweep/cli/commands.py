"""The ``lipsweep`` subcommands: one ``cmd_*`` per subcommand (:data:`COMMANDS`), each turning
its parsed flags into the command's options dataclass, calling :mod:`lipsweep.api` and
printing the result (the ``print_*`` helpers); the return value is the exit status."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import TYPE_CHECKING, Any, Callable

from lipsweep.core.paths import shown_path

if TYPE_CHECKING:
    from lipsweep.api import ExportResult, ParetoResult, SweepResult

EXIT_USAGE = 2
EXIT_FAILURE = 1


def cmd_data(args: argparse.Namespace) -> int:
    from lipsweep import api

    d = api.prepare_data(_options(api.DataPrepareOptions, args))
    sys.stdout.write(
        f"{d.file}  ({d.train} train / {d.test} test images, "
        f"{d.bytes / 1e6:.1f} MB, sha256 {d.sha256})\n"
        f"manifest: {d.manifest_file}\n"
        f"use it in a space: dataset: {d.dataset}, data_dir: {d.file}\n"
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
        _out(api.settings_help())
        return 0
    result = api.train(_options(api.TrainOptions, args))
    from lipsweep.core.metric_names import SUMMARY_METRICS

    keys = [k for k in SUMMARY_METRICS if k in result.metrics]
    _out("  ".join(f"{k}={result.metrics[k]:.2f}" for k in keys))
    _out(f"metrics: {shown_path(result.metrics_file)}")
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
        from lipsweep.sweep.driver import resume_command

        hint = resume_command(result.space, result.experiment, result.storage, result.tracking_uri)
        _out(f"sweep interrupted; resume with: {hint}")
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
    from lipsweep.decide.sweep_runs import CHAMPION

    keys = (ACC_CLEAN, attack_metric("pgd", 4), attack_metric("aa", 2), LIP_JACOBIAN_MEDIAN)
    m = result.metrics
    _out(f"exported run {result.run_id} ({result.selected_by}) to {shown_path(result.folder)}")
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
        f"wrote {shown_path(result.report)} ({result.arms} arms, {result.runs} runs; "
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
    took = f"{result.sweep_seconds:.0f} s"
    if result.sweep.ran == 0:  # a rerun of a finished demo: its resume had nothing to run
        took = f"nothing left to run, every trial had ended ({took} to check)"
    state = shown_path(result.sweep.experiment_path)
    sys.stdout.write(f"""
== Where to look ==
sweep: {took}; Ray Tune state in {state}
MLflow UI:  {installed_tool("mlflow")} ui --backend-store-uri {uri} --host 127.0.0.1 --port 5000
            then open http://127.0.0.1:5000 -> experiment '{opts.experiment}'
export:     {shown_path(result.export.folder)}  (load with lipsweep.load_exported(...))
reruns:     the same seeds give these numbers again on this machine; another CPU or
            torch build sums in another order and trains to other numbers
""")
    return 0


def cmd_bench_search(args: argparse.Namespace) -> int:
    from lipsweep import api
    from lipsweep.search.replay import front_kept

    result = api.bench_search(_options(api.BenchSearchOptions, args))
    s = result.summary
    oracle = s["oracle_compute_fraction"]
    _out(
        f"{s['grid']['configurations']} configurations x {s['seeds']} seeds, {s['replays']} "
        f"replays, {s['workers']} workers, budget {s['budget']:.0%}; medians over replays; the "
        f"oracle (every configuration off the grid's front stopped at the first rung) spends "
        f"{oracle:.1%} of the grid's compute"
    )
    _out(
        f"  {'method':<18} {'HV@budget':>9} {'>=0.8':>5} {'to 90%':>6} {'final HV':>8} "
        f"{'front kept':>10} {'compute':>7} {'x oracle':>8} {'front stopped':>13}"
    )
    for section in ("methods", "references"):
        if section == "references":
            _out("references (they know the final values: what the table allows, not methods)")
        for name, m in s[section].items():
            hv = m["hv_fraction_at_budget"]["median"]
            share = m["hv_fraction_at_budget"]["share_at_least_0.8"]
            to90 = m["compute_fraction_to_90"]["median"]
            reach = "never" if to90 is None else f"{to90:6.1%}"
            spent = m["total_compute_fraction"]["median"]
            kept = front_kept(m)
            _out(
                f"  {name:<18} {hv:9.3f} {share:5.0%} {reach:>6} "
                f"{m['final_hv_fraction']['median']:8.3f} {kept:10.0%} {spent:7.1%} "
                f"{spent / oracle:8.2f} {m['front_configurations_stopped']['median']:13g}"
            )
    _out(f"wrote {result.summary_path} and {result.plot}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from lipsweep import api

    sys.stdout.write("\n".join(api.models()) + "\n")
    return 0


def cmd_spaces(args: argparse.Namespace) -> int:
    from lipsweep import api

    rows = api.spaces()
    width = max((len(s.name) for s in rows), default=0)
    _out("\n".join(f"{s.name:<{width}}  {s.description}".rstrip() for s in rows))
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
