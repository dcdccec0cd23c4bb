"""``lipsweep pareto`` and ``lipsweep export``: decide on a finished sweep, in MLflow.

Both read the FINISHED child runs of the experiment's sweep (runs stopped early by ASHA end
KILLED and are left out). ``pareto`` ranks them (:mod:`lipsweep.pareto`), prints the front,
tags every run ``pareto=true|false`` and ``pareto_rank=N``, and logs ``pareto/pareto.json``
and the figures to the parent run; running it twice gives the same tags and artifacts.
``export`` picks a run (``--run-id`` or the ``--select`` rule on the front), downloads its
``checkpoint/`` artifacts and writes a self-describing folder (:mod:`lipsweep.export`).
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from lipsweep.tracking import (FINISHED, READ_RETRIES, TAG_KIND, Tracker, TrackingError,
                               check_tracking_uri, redact_uri)

_log = logging.getLogger("lipsweep.review")


@dataclass
class SweepRuns:
    parent_id: Optional[str]
    records: list[dict[str, Any]]
    runs: dict[str, Any]


def _usage(msg: str) -> Exception:
    from lipsweep.config_base import UsageError

    return UsageError(msg)


def read_tracker(tracking_uri: str, experiment: str) -> Tracker:
    """A tracker for a read command: the URI checked first (a missing SQLite store is an
    error, never created), few retries and MLflow's HTTP retries off, so a bad
    ``--tracking-uri`` fails within ~20 s."""
    check_tracking_uri(tracking_uri, must_exist=True)
    return Tracker(tracking_uri, experiment, retries=READ_RETRIES, reader=True)


def _read_command(fn: Callable[[argparse.Namespace], int]
                  ) -> Callable[[argparse.Namespace], int]:
    """MLflow failing under a read command is a --tracking-uri problem: exit 2, one line."""
    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except TrackingError as err:
            shown = redact_uri(args.tracking_uri)
            text = str(err).replace(f" at {shown}", "")
            raise _usage(f"--tracking-uri {shown}: {text}") from None
    return run


def load_sweep_runs(tracker: Tracker) -> SweepRuns:
    """FINISHED trial runs of the experiment, as pareto records; exit-2 errors if none."""
    exp_id = tracker.existing_experiment_id()
    if exp_id is None:
        names = sorted(e.name for e in tracker.client.search_experiments())
        raise _usage(f"--experiment {tracker.experiment}: no experiment "
                     f"{tracker.experiment!r} at {tracker.shown_uri} (nothing created); "
                     f"experiments there: {names or 'none'}")
    runs = tracker.search(f"tags.`{TAG_KIND}` = 'trial' and attributes.status = '{FINISHED}'",
                          exp_id)
    if not runs:
        raise _usage(f"experiment {tracker.experiment!r} has no FINISHED trial runs yet; "
                     "wait for the sweep to finish or check `lipsweep sweep` output")
    parents = tracker.search(f"tags.`{TAG_KIND}` = 'sweep'", exp_id)
    parents.sort(key=lambda r: r.info.start_time or 0, reverse=True)
    records = [{"run_id": r.info.run_id, "run_name": r.info.run_name or "",
                "metrics": dict(r.data.metrics), "params": dict(r.data.params)} for r in runs]
    return SweepRuns(parents[0].info.run_id if parents else None, records,
                     {r.info.run_id: r for r in runs})


def _check_objectives(objectives, records: list[dict[str, Any]]) -> None:
    available = sorted({m for r in records for m in r["metrics"]})
    for o in objectives:
        if not any(o.name in r["metrics"] for r in records):
            raise _usage(f"--objective {o}: no run has metric {o.name!r}; available metrics: "
                         f"{', '.join(available)}")


def rank_sweep(tracker: Tracker, objective_specs: Optional[list[str]]):
    from lipsweep.pareto import pareto_rank, resolve_objectives

    objectives = resolve_objectives(objective_specs)
    sweep = load_sweep_runs(tracker)
    _check_objectives(objectives, sweep.records)
    return sweep, pareto_rank(sweep.records, objectives)


@_read_command
def run_pareto_command(args: argparse.Namespace) -> int:
    from lipsweep.pareto import front_table, pareto_json
    from lipsweep.selection import DEFAULT_SELECT_RULE, select_from_front
    from lipsweep.pareto_plots import parallel_coordinates, scatter_front

    tracker = read_tracker(args.tracking_uri, args.experiment)
    sweep, result = rank_sweep(tracker, args.objective)
    ranks = [int(r) for r in result.ranks]
    try:
        selection = select_from_front(sweep.records, ranks, DEFAULT_SELECT_RULE)
    except ValueError:
        selection = None
    for rec, rank in zip(sweep.records, ranks):
        tracker.set_tags(rec["run_id"], {"pareto": "true" if rank == 1 else "false",
                                         "pareto_rank": rank})
    doc = pareto_json(sweep.records, ranks, result.objectives, selection=selection)
    if sweep.parent_id is not None:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "pareto"
            out.mkdir()
            (out / "pareto.json").write_text(json.dumps(doc, indent=2, sort_keys=True))
            sel_id = selection.run_id if selection else None
            scatter_front(sweep.records, ranks, path=out / "pareto_scatter.png",
                          selected=sel_id, objectives=result.objectives,
                          title=f"{args.experiment}: clean vs robust accuracy")
            parallel_coordinates(sweep.records, ranks, result.objectives,
                                 path=out / "pareto_parallel.png", selected=sel_id)
            (out / "pareto_front.txt").write_text(
                front_table(sweep.records, ranks, result.objectives))
            _write_pareto_table(tracker, sweep.parent_id, out, sweep.records, ranks,
                                result.objectives)
            tracker.log_artifacts(sweep.parent_id, out, "pareto")
        tracker.set_tags(sweep.parent_id, {"pareto_front_size": sum(r == 1 for r in ranks)})
    sys.stdout.write(front_table(sweep.records, ranks, result.objectives) + "\n")
    if selection is not None:
        sys.stdout.write(f"export pick ({DEFAULT_SELECT_RULE}): {selection.run_id} — "
                         f"{selection.explanation}\n")
    sys.stdout.write(f"tagged {len(ranks)} runs (pareto=true on {sum(r == 1 for r in ranks)});"
                     f" artifacts under pareto/ of parent run {sweep.parent_id}\n")
    return 0


def _write_pareto_table(tracker: Tracker, parent_id: str, out: Path, records: list,
                        ranks: list[int], objectives: Any) -> None:
    """pareto/pareto_table.json: the ranking as an MLflow table artifact, tagged as one."""
    from lipsweep.decide.mlflow_table import (LOGGED_ARTIFACTS_TAG, TABLE_FILE,
                                              logged_artifacts_tag, pareto_table, write_table)

    write_table(out, pareto_table(records, ranks, objectives))
    run = tracker._call("get_run", lambda: tracker.client.get_run(parent_id))
    tag = logged_artifacts_tag(run.data.tags.get(LOGGED_ARTIFACTS_TAG), f"pareto/{TABLE_FILE}")
    if tag is not None:
        tracker.set_tags(parent_id, {LOGGED_ARTIFACTS_TAG: tag})


@_read_command
def run_export_command(args: argparse.Namespace) -> int:
    from lipsweep.selection import DEFAULT_SELECT_RULE, parse_selection_rule, select_from_front

    from lipsweep.export import check_out

    out = Path(args.out)
    check_out(out, args.force)  # --force replaces only a previous export (issue 16)
    rule = args.select or DEFAULT_SELECT_RULE
    parse_selection_rule(rule)  # validate before any MLflow work
    tracker = read_tracker(args.tracking_uri, args.experiment)
    if args.run_id:
        sweep = load_sweep_runs(tracker)
        if args.run_id not in sweep.runs:
            raise _usage(f"--run-id {args.run_id} is not a FINISHED trial run of experiment "
                         f"{args.experiment!r}")
        run_id, how = args.run_id, "--run-id"
    else:
        sweep, result = rank_sweep(tracker, args.objective)
        try:
            sel = select_from_front(sweep.records, [int(r) for r in result.ranks], rule)
        except ValueError as err:
            raise _usage(f"--select {rule}: {err}") from None
        run_id, how = sel.run_id, f"{rule} ({sel.explanation})"
    path = export_run(tracker, run_id, out, selected_by=how, force=args.force)
    version = register_export(tracker, run_id, path, args.register) if args.register else None
    metrics = json.loads((path / "metrics.json").read_text())
    keys = ("acc_clean", "acc_pgd_4", "acc_aa_2", "lip_jacobian_median")
    sys.stdout.write(f"exported run {run_id} ({how}) to {path}\n  " + "  ".join(
        f"{k}={metrics[k]:.2f}" for k in keys if k in metrics) + "\n")
    if version is not None:
        sys.stdout.write(f"registered models:/{args.register}/{version} (alias {CHAMPION}): "
                         "mlflow.pyfunc.load_model(...).predict([0, 1] images) -> logits\n")
    return 0


def export_run(tracker: Tracker, run_id: str, out: Path, selected_by: str,
               force: bool = False) -> Path:
    """Download a run's checkpoint artifacts and write the export folder."""
    from safetensors.torch import load_file

    from lipsweep.config import TrialConfig
    from lipsweep.export import SPEC_METRICS, build_config_json, write_export
    from lipsweep.models import model_normalization

    run = tracker.client.get_run(run_id)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tracker._call("download_artifacts", lambda: tracker.client.download_artifacts(
            run_id, "checkpoint", tmp)))
        if not (local / "model.safetensors").is_file():
            raise _usage(f"run {run_id} has no checkpoint/model.safetensors artifact")
        flat = json.loads((local / "config.json").read_text())
        cfg = TrialConfig.from_flat(flat)
        state = load_file(str(local / "model.safetensors"))
        metrics = {k: v for k, v in run.data.metrics.items()}
        source = {"tracking_uri": tracker.shown_uri, "experiment": tracker.experiment,
                  "run_id": run_id, "run_name": run.info.run_name,
                  "checkpoint": run.data.tags.get("lipsweep.checkpoint"),
                  "selected_by": selected_by}
        mean, std = model_normalization(cfg.model)
        config = build_config_json(flat, mean, std, source)
        ordered = {k: metrics[k] for k in SPEC_METRICS if k in metrics}
        ordered.update({k: v for k, v in sorted(metrics.items()) if k not in ordered})
        return write_export(out, state, config, ordered, force=force)


CHAMPION = "champion"
"""Alias of the registered version that ``export --register`` made last."""


def register_export(tracker: Tracker, run_id: str, folder: Path, name: str) -> str:
    """Log the export as an MLflow pyfunc model (``model/`` of the run, see
    :func:`lipsweep.export.save_pyfunc_model`) and register it as a new version of ``name``,
    aliased :data:`CHAMPION`, with the export's model card as its description. Returns the
    version: ``mlflow.pyfunc.load_model("models:/NAME@champion")`` predicts logits."""
    from lipsweep.export import save_pyfunc_model

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_pyfunc_model(folder, Path(tmp) / "model")
        tracker.log_artifacts(run_id, model_dir, "model")
    source = f"runs:/{run_id}/model"
    card = (folder / "README.md").read_text() if (folder / "README.md").is_file() else ""
    tracker._call("create_registered_model", lambda: _ensure_registered(tracker, name))
    mv = tracker._call("create_model_version", lambda: tracker.client.create_model_version(
        name, source, run_id=run_id, description=card))
    tracker._call("set_registered_model_alias",
                  lambda: tracker.client.set_registered_model_alias(name, CHAMPION, mv.version))
    _log.info("registered %s version %s (alias %s) from %s", name, mv.version, CHAMPION,
              source)
    return str(mv.version)


def _ensure_registered(tracker: Tracker, name: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        tracker.client.create_registered_model(name)
    except MlflowException as exc:
        if "already exists" not in str(exc).lower() and "RESOURCE_ALREADY_EXISTS" not in str(exc):
            raise
