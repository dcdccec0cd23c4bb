"""``pareto``, ``export`` and ``report``: decide on a finished sweep, in MLflow.

Each reads the FINISHED child runs of the experiment's sweep through
:mod:`lipsweep.decide.commands` (runs stopped early by ASHA end KILLED and are left out).
``pareto`` ranks them (over arms when an arm has two or more seeds, over runs otherwise or
with ``per_run``), tags every run ``pareto=true|false``, ``pareto_rank``, ``arm``,
``arm_id``, ``arm_rank`` and ``arm_front``, and logs ``pareto/`` (pareto.json, the figures,
the table) to the parent run; running it twice gives the same tags and artifacts.
``export`` picks a run (``run_id``, or the ``select`` rule on the front) and writes its
checkpoint as a self-describing folder. ``report`` writes the markdown report of the arms.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Optional

from lipsweep.api.options import ExportOptions, ParetoOptions, ReportOptions
from lipsweep.api.results import (
    ExportPick,
    ExportResult,
    FrontMember,
    ParetoResult,
    ReportResult,
)


@contextlib.contextmanager
def reading(tracking_uri: str) -> Iterator[None]:
    """MLflow failing under a read command is a ``--tracking-uri`` problem: a UsageError."""
    from lipsweep.core.config_base import UsageError
    from lipsweep.tracking import TrackingError, redact_uri

    try:
        yield
    except TrackingError as err:
        shown = redact_uri(tracking_uri)
        text = str(err).replace(f" at {shown}", "")
        raise UsageError(f"--tracking-uri {shown}: {text}") from None


def _front(records: list, rk: Any, objectives: Any) -> tuple[FrontMember, ...]:
    from lipsweep.decide.arms import arm_stats

    names = [o.name for o in objectives]
    if rk.by_arms:
        return tuple(
            FrontMember(
                a.name,
                a.arm_id,
                tuple(t.run_id for t in a.runs),
                {n: arm_stats(a, n).mean for n in names if a.values(n)},
            )
            for a, r in zip(rk.arms, rk.arm_ranks)
            if r == 1
        )
    return tuple(
        FrontMember(
            rec["run_name"] or rec["run_id"],
            rk.arms[rk.arm_of[rec["run_id"]]].arm_id,
            (rec["run_id"],),
            {n: float(rec["metrics"][n]) for n in names if n in rec["metrics"]},
        )
        for rec, rank in zip(records, rk.ranks)
        if rank == 1
    )


def pareto(opts: ParetoOptions) -> ParetoResult:
    with reading(opts.tracking_uri):
        return _pareto(opts)


def _pareto(opts: ParetoOptions) -> ParetoResult:
    from lipsweep.decide.arms import arm_records, arm_table
    from lipsweep.decide.commands import (
        arms_json,
        rank_runs_or_arms,
        rank_sweep,
        read_tracker,
        select_export,
        write_pareto_table,
    )
    from lipsweep.decide.pareto import front_table, pareto_json
    from lipsweep.decide.plots import parallel_coordinates, scatter_front
    from lipsweep.decide.selection import DEFAULT_SELECT_RULE

    tracker = read_tracker(opts.tracking_uri, opts.experiment)
    sweep, result = rank_sweep(tracker, opts.objective)
    rk = rank_runs_or_arms(sweep.records, result, opts.per_run)
    ranks = rk.ranks
    try:
        selection = select_export(sweep.records, rk, DEFAULT_SELECT_RULE)
    except ValueError:
        selection = None
    for rec, rank in zip(sweep.records, ranks):
        i = rk.arm_of[rec["run_id"]]
        tracker.set_tags(
            rec["run_id"],
            {
                "pareto": "true" if rank == 1 else "false",
                "pareto_rank": rank,
                "arm": rk.arms[i].name,
                "arm_id": rk.arms[i].arm_id,
                "arm_rank": rk.arm_ranks[i],
                "arm_front": "true" if rk.arm_ranks[i] == 1 else "false",
            },
        )
    doc = pareto_json(sweep.records, ranks, result.objectives, selection=selection)
    doc["ranked_by"] = "arms" if rk.by_arms else "runs"
    doc["arms"] = arms_json(rk, result.objectives)
    if rk.by_arms:  # the figures and the table show the arms (points = means over seeds)
        fig_recs = arm_records(rk.arms, sorted({m for r in sweep.records for m in r["metrics"]}))
        fig_ranks = rk.arm_ranks
        sel_id = rk.arms[rk.arm_of[selection.run_id]].arm_id if selection else None
        table = arm_table(rk.arms, rk.arm_ranks, result.objectives)
    else:
        fig_recs, fig_ranks = sweep.records, ranks
        sel_id = selection.run_id if selection else None
        table = front_table(sweep.records, ranks, result.objectives)
    if sweep.parent_id is not None:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "pareto"
            out.mkdir()
            (out / "pareto.json").write_text(json.dumps(doc, indent=2, sort_keys=True))
            what = "arm means over seeds" if rk.by_arms else "clean vs robust accuracy"
            scatter_front(
                fig_recs,
                fig_ranks,
                path=out / "pareto_scatter.png",
                selected=sel_id,
                objectives=result.objectives,
                title=f"{opts.experiment}: {what}",
            )
            parallel_coordinates(
                fig_recs,
                fig_ranks,
                result.objectives,
                path=out / "pareto_parallel.png",
                selected=sel_id,
            )
            (out / "pareto_front.txt").write_text(table)
            write_pareto_table(
                tracker, sweep.parent_id, out, sweep.records, ranks, result.objectives
            )
            tracker.log_artifacts(sweep.parent_id, out, "pareto")
        tracker.set_tags(
            sweep.parent_id,
            {"pareto_front_size": sum(r == 1 for r in ranks), "pareto_ranked_by": doc["ranked_by"]},
        )
    pick = (
        ExportPick(selection.run_id, DEFAULT_SELECT_RULE, selection.explanation)
        if selection is not None
        else None
    )
    return ParetoResult(
        experiment=opts.experiment,
        ranked_by=doc["ranked_by"],
        objectives=tuple(f"{o.name}:{o.direction}" for o in result.objectives),
        front=_front(sweep.records, rk, result.objectives),
        ranks={rec["run_id"]: int(r) for rec, r in zip(sweep.records, ranks)},
        pick=pick,
        parent_run_id=sweep.parent_id,
        table=table,
    )


def export(opts: ExportOptions) -> ExportResult:
    from lipsweep.decide.export import check_out

    out = Path(opts.out)
    check_out(out, opts.force, make_parents=False)  # force: only a previous export (issue 16)
    with reading(opts.tracking_uri):
        return _export(opts, out)


def _export(opts: ExportOptions, out: Path) -> ExportResult:
    from lipsweep.core.config_base import UsageError
    from lipsweep.decide.commands import (
        export_run,
        load_sweep_runs,
        rank_runs_or_arms,
        rank_sweep,
        read_tracker,
        register_export,
        select_export,
    )
    from lipsweep.decide.selection import DEFAULT_SELECT_RULE

    rule = opts.select or DEFAULT_SELECT_RULE
    tracker = read_tracker(opts.tracking_uri, opts.experiment)
    if opts.run_id:
        sweep = load_sweep_runs(tracker)
        if opts.run_id not in sweep.runs:
            raise UsageError(
                f"--run-id {opts.run_id} is not a FINISHED trial run of experiment "
                f"{opts.experiment!r}"
            )
        run_id, how = opts.run_id, "--run-id"
    else:
        sweep, result = rank_sweep(tracker, opts.objective)
        rk = rank_runs_or_arms(sweep.records, result, opts.per_run)
        try:
            sel = select_export(sweep.records, rk, rule)
        except ValueError as err:
            raise UsageError(f"--select {rule}: {err}") from None
        run_id, how = sel.run_id, f"{rule} ({sel.explanation})"
    path = export_run(tracker, run_id, out, selected_by=how, force=opts.force)
    registered: Optional[str] = None
    if opts.register is not None:
        version = register_export(tracker, run_id, path, opts.register)
        registered = f"models:/{opts.register}/{version}"
    metrics = json.loads((path / "metrics.json").read_text())
    return ExportResult(path, run_id, how, metrics, registered)


def report(opts: ReportOptions) -> ReportResult:
    from lipsweep.core.paths import check_folder, safe_folder_name

    out = check_folder(
        "--out",
        opts.out or Path("reports") / safe_folder_name(opts.experiment),
        make_parents=opts.out is None,
    )
    with reading(opts.tracking_uri):
        return _report(opts, out)


def _report(opts: ReportOptions, out: Path) -> ReportResult:
    from lipsweep.decide.commands import rank_runs_or_arms, rank_sweep, read_tracker
    from lipsweep.decide.report import download_npz, write_report, written_files
    from lipsweep.tracking import redact_uri

    tracker = read_tracker(opts.tracking_uri, opts.experiment)
    sweep, result = rank_sweep(tracker, opts.objective)
    rk = rank_runs_or_arms(sweep.records, result, per_run=False)
    with tempfile.TemporaryDirectory() as tmp:
        npz = download_npz(tracker, [r["run_id"] for r in sweep.records], Path(tmp))
        path = write_report(
            sweep.records,
            rk.arms,
            rk.arm_ranks,
            rk.ranks,
            result.objectives,
            rk.by_arms,
            npz,
            out,
            opts.experiment,
            redact_uri(opts.tracking_uri),
        )
    if sweep.parent_id is not None:
        with tempfile.TemporaryDirectory() as tmp:
            staged = Path(tmp) / "report"
            staged.mkdir()
            for f in written_files(out):
                shutil.copyfile(f, staged / f.name)
            tracker.log_artifacts(sweep.parent_id, staged, "report")
    figures = tuple(sorted((p for p in written_files(out) if p.suffix == ".png"), key=str))
    return ReportResult(out, path, figures, len(rk.arms), len(sweep.records), sweep.parent_id)
