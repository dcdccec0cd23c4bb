"""``pareto``, ``export`` and ``report``: decide on a finished sweep, in MLflow.

Each reads the FINISHED child runs of the experiment's sweep through
:mod:`lipsweep.decide.sweep_runs` (runs stopped early by ASHA end KILLED and are left out).
``pareto`` ranks them once (:func:`lipsweep.decide.front.build_front`: over arms when an arm
has two or more seeds, over runs otherwise or with ``per_run``) and, from that one front,
tags every run ``pareto=true|false``, ``pareto_rank``, ``arm``, ``arm_id``, ``arm_rank`` and
``arm_front``, and logs ``pareto/`` (pareto.json, the figures, the table) to the parent run;
running it twice gives the same tags and artifacts.
``export`` picks a run (``run_id``, or the ``select`` rule on the front) and writes its
checkpoint as a self-describing folder. ``report`` writes the markdown report of the arms.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Optional

from lipsweep.api.options import ExportOptions, ParetoOptions, ReportOptions
from lipsweep.api.results import ExportResult, ParetoResult, ReportResult


@contextlib.contextmanager
def reading(tracking_uri: str) -> Iterator[None]:
    """MLflow failing under a read command is a ``--tracking-uri`` problem: a UsageError;
    a local file failing under it (a full disk while downloading a checkpoint, no permission)
    is not: a WriteError naming the file and the cause (the CLI exits 1)."""
    from lipsweep.core.config_base import UsageError
    from lipsweep.core.paths import WriteError
    from lipsweep.tracking import LocalIOError, TrackingError, redact_uri

    try:
        yield
    except LocalIOError as err:
        failed = WriteError(str(err))
        failed.errno = err.errno
        raise failed from err
    except TrackingError as err:
        shown = redact_uri(tracking_uri)
        text = str(err).replace(f" at {shown}", "")
        raise UsageError(f"--tracking-uri {shown}: {text}") from None


def pareto(opts: ParetoOptions) -> ParetoResult:
    with reading(opts.tracking_uri):
        return _pareto(opts)


def _pareto(opts: ParetoOptions) -> ParetoResult:
    from lipsweep.decide.plots import front_parallel, front_scatter
    from lipsweep.decide.selection import DEFAULT_SELECT_RULE
    from lipsweep.decide.sweep_runs import read_tracker, sweep_front, write_pareto_table

    tracker = read_tracker(opts.tracking_uri, opts.experiment)
    sweep, front = sweep_front(tracker, opts.objective, DEFAULT_SELECT_RULE, opts.per_run)
    for run_id, tags in front.run_tags().items():
        tracker.set_tags(run_id, tags)
    if sweep.parent_id is not None:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "pareto"
            out.mkdir()
            doc = front.as_json()
            (out / "pareto.json").write_text(json.dumps(doc, indent=2, sort_keys=True))
            what = "arm means over seeds" if front.by_arms else "clean vs robust accuracy"
            front_scatter(front, out / "pareto_scatter.png", title=f"{opts.experiment}: {what}")
            front_parallel(front, out / "pareto_parallel.png")
            (out / "pareto_front.txt").write_text(front.table)
            write_pareto_table(tracker, sweep.parent_id, out, front)
            tracker.log_artifacts(sweep.parent_id, out, "pareto")
        tracker.set_tags(sweep.parent_id, front.parent_tags())
    return ParetoResult(opts.experiment, front, sweep.parent_id)


def export(opts: ExportOptions) -> ExportResult:
    from lipsweep.decide.export import check_out

    out = Path(opts.out)
    check_out(out, opts.force, make_parents=False)  # force: only a previous export
    with reading(opts.tracking_uri):
        return _export(opts, out)


def _export(opts: ExportOptions, out: Path) -> ExportResult:
    from lipsweep.core.config_base import UsageError
    from lipsweep.decide.selection import DEFAULT_SELECT_RULE
    from lipsweep.decide.sweep_runs import (
        export_run,
        load_sweep_runs,
        read_tracker,
        register_export,
        sweep_front,
    )

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
        sweep, front = sweep_front(tracker, opts.objective, rule, opts.per_run)
        if front.selection is None:
            raise UsageError(f"--select {rule}: {front.no_selection}")
        run_id, how = front.selection.run_id, front.selected_by
    path = export_run(tracker, run_id, out, selected_by=how, force=opts.force)
    registered: Optional[str] = None
    logged_model: Optional[str] = None
    if opts.register is not None:
        made = register_export(tracker, run_id, path, opts.register)
        registered = f"models:/{opts.register}/{made.version}"
        logged_model = made.model_uri
    metrics = json.loads((path / "metrics.json").read_text())
    return ExportResult(path, run_id, how, metrics, registered, logged_model)


def report(opts: ReportOptions) -> ReportResult:
    from lipsweep.core.paths import check_folder, safe_folder_name

    # a report is rewritten at will: its missing parent folders are made, as for the default
    out = check_folder(
        "--out", opts.out or Path("reports") / safe_folder_name(opts.experiment), make_parents=True
    )
    with reading(opts.tracking_uri):
        return _report(opts, out)


def _report(opts: ReportOptions, out: Path) -> ReportResult:
    from lipsweep.decide.report import download_npz, write_front_report, written_files
    from lipsweep.decide.sweep_runs import read_tracker, sweep_front
    from lipsweep.tracking import redact_uri

    tracker = read_tracker(opts.tracking_uri, opts.experiment)
    sweep, front = sweep_front(tracker, opts.objective)
    with tempfile.TemporaryDirectory() as tmp:
        npz = download_npz(tracker, [r["run_id"] for r in sweep.records], Path(tmp))
        path = write_front_report(front, npz, out, opts.experiment, redact_uri(opts.tracking_uri))
    if sweep.parent_id is not None:
        with tempfile.TemporaryDirectory() as tmp:
            staged = Path(tmp) / "report"
            staged.mkdir()
            for f in written_files(out):
                shutil.copyfile(f, staged / f.name)
            tracker.log_artifacts(sweep.parent_id, staged, "report")
    figures = tuple(sorted((p for p in written_files(out) if p.suffix == ".png"), key=str))
    return ReportResult(out, path, figures, len(front.arms), len(sweep.records), sweep.parent_id)
