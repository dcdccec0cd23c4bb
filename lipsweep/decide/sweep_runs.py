"""The pieces ``pareto``, ``export``, ``report`` and ``confirm`` share: a sweep read from MLflow.

They read the FINISHED child runs of the experiment's sweep (runs stopped early by ASHA end
KILLED and are left out) and rank them once into a :class:`lipsweep.decide.front.Front`: over
arms (configs that differ only in seed, :mod:`lipsweep.decide.arms`, ranked by their means)
when an arm has two or more seeds, over single runs otherwise or with ``--per-run``; with the
export pick by the ``--select`` rule on that front (over arms, the rule chooses an arm, then
its most typical run, :mod:`lipsweep.decide.selection`); :func:`export_run` downloads the run's
``checkpoint/`` artifacts and writes a self-describing folder (:mod:`lipsweep.decide.export`).
The commands themselves, which put these together, are :mod:`lipsweep.api`.
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from lipsweep.tracking import READ_RETRIES, Tracker, check_tracking_uri
from lipsweep.trial.checkpoint_files import FINAL_CONFIG, MODEL_FILE

if TYPE_CHECKING:  # pragma: no cover
    from lipsweep.decide.front import Front

_log = logging.getLogger("lipsweep.decide.sweep_runs")


@dataclass
class SweepRuns:
    parent_id: Optional[str]
    records: list[dict[str, Any]]
    runs: dict[str, Any]


def _usage(msg: str) -> Exception:
    from lipsweep.core.config_base import UsageError

    return UsageError(msg)


def read_tracker(tracking_uri: str, experiment: str) -> Tracker:
    """A tracker for a read command: the URI checked first (a missing SQLite store is an
    error, never created), few retries and MLflow's HTTP retries off, so a bad
    ``--tracking-uri`` fails within ~20 s."""
    check_tracking_uri(tracking_uri, must_exist=True)
    return Tracker(tracking_uri, experiment, retries=READ_RETRIES, reader=True)


def load_sweep_runs(tracker: Tracker) -> SweepRuns:
    """FINISHED trial runs of the experiment, as pareto records; exit-2 errors if none."""
    exp_id = tracker.existing_experiment_id()
    if exp_id is None:
        names = tracker.experiment_names()
        raise _usage(
            f"--experiment {tracker.experiment}: no experiment "
            f"{tracker.experiment!r} at {tracker.shown_uri} (nothing created); "
            f"experiments there: {names or 'none'}"
        )
    runs = tracker.finished_trials(exp_id)
    if not runs:
        raise _usage(
            f"experiment {tracker.experiment!r} has no FINISHED trial runs yet; "
            "wait for the sweep to finish or check `lipsweep sweep` output"
        )
    parents = tracker.sweep_parents(exp_id)
    records = [
        {
            "run_id": r.info.run_id,
            "run_name": r.info.run_name or "",
            "metrics": dict(r.data.metrics),
            "params": dict(r.data.params),
        }
        for r in runs
    ]
    return SweepRuns(
        parents[0].info.run_id if parents else None, records, {r.info.run_id: r for r in runs}
    )


def _check_objectives(objectives, records: list[dict[str, Any]]) -> None:
    available = sorted({m for r in records for m in r["metrics"]})
    for o in objectives:
        if not any(o.name in r["metrics"] for r in records):
            raise _usage(
                f"--objective {o}: no run has metric {o.name!r}; available metrics: "
                f"{', '.join(available)}"
            )


def sweep_front(
    tracker: Tracker,
    objective_specs: Optional[list[str]],
    rule: Optional[str] = None,
    per_run: bool = False,
) -> tuple[SweepRuns, "Front"]:
    """The sweep's FINISHED runs and their front (:func:`lipsweep.decide.front.build_front`,
    ranked once here for the whole command); exit-2 errors for an objective no run logged."""
    from lipsweep.decide.front import build_front
    from lipsweep.decide.pareto import resolve_objectives

    objectives = resolve_objectives(objective_specs)
    sweep = load_sweep_runs(tracker)
    _check_objectives(objectives, sweep.records)
    front = build_front(sweep.records, objectives, rule, per_run)
    for run_id, why in front.runs.excluded.items():  # e.g. acc_clean = inf: never ranked
        _log.warning("run %s is left out of the ranking and the front: %s", run_id, why)
    return sweep, front


def write_pareto_table(tracker: Tracker, parent_id: str, out: Path, front: "Front") -> None:
    """pareto/pareto_table.json: the front's ranking as an MLflow table artifact, tagged as one."""
    from lipsweep.tracking.table import (
        LOGGED_ARTIFACTS_TAG,
        TABLE_FILE,
        logged_artifacts_tag,
        pareto_table,
        write_table,
    )

    write_table(out, pareto_table(front.records(), list(front.ranks), front.objectives))
    run = tracker.get_run(parent_id)
    tag = logged_artifacts_tag(run.data.tags.get(LOGGED_ARTIFACTS_TAG), f"pareto/{TABLE_FILE}")
    if tag is not None:
        tracker.set_tags(parent_id, {LOGGED_ARTIFACTS_TAG: tag})


def download_checkpoint(tracker: Tracker, run_id: str) -> tuple[dict[str, Any], bytes]:
    """The run's final checkpoint artifacts: its flat trial config and its weights (bytes);
    a missing or damaged file (config.json not a JSON mapping, weights not a whole
    safetensors file) is a UsageError naming the run and the file."""
    from lipsweep.core.safetensors_header import HeaderError, read_header

    with tempfile.TemporaryDirectory() as tmp:
        local = tracker.download_artifacts(run_id, "checkpoint", tmp)
        config, weights = local / FINAL_CONFIG, local / MODEL_FILE
        missing = [f.name for f in (config, weights) if not f.is_file()]
        if missing:
            raise _usage(f"run {run_id} has no checkpoint/{missing[0]} artifact")
        try:
            flat = json.loads(config.read_bytes())
        except ValueError as err:  # not JSON, not UTF-8
            raise damaged_artifact(run_id, FINAL_CONFIG, f"not JSON ({err})") from None
        if not isinstance(flat, dict):
            kind = type(flat).__name__
            raise damaged_artifact(run_id, FINAL_CONFIG, f"a JSON {kind}, not a mapping")
        try:
            read_header(weights)
        except HeaderError as err:
            raise damaged_artifact(run_id, MODEL_FILE, str(err)) from None
        return flat, weights.read_bytes()


def damaged_artifact(run_id: str, name: str, problem: str) -> Exception:
    """The error of run ``run_id``'s damaged ``checkpoint/<name>`` artifact."""
    return _usage(f"run {run_id}: its checkpoint/{name} artifact is damaged: {problem}")


def export_run(
    tracker: Tracker, run_id: str, out: Path, selected_by: str, force: bool = False
) -> Path:
    """Download a run's checkpoint artifacts and write the export folder."""
    from safetensors.torch import load

    from lipsweep.core.config_base import ConfigError
    from lipsweep.decide.export import SPEC_METRICS, write_export
    from lipsweep.settings.config import TrialConfig
    from lipsweep.vit.export_format import build_config_json
    from lipsweep.vit.models import model_normalization

    run = tracker.get_run(run_id)
    flat, weights = download_checkpoint(tracker, run_id)
    try:
        cfg = TrialConfig.from_flat(flat)
    except ConfigError as err:
        raise _usage(
            f"run {run_id}: its checkpoint/{FINAL_CONFIG} artifact is not a trial config "
            f"this lipsweep reads: {err.format()}"
        ) from None
    state = load(weights)
    metrics = {k: v for k, v in run.data.metrics.items()}
    source = {
        "tracking_uri": tracker.shown_uri,
        "experiment": tracker.experiment,
        "run_id": run_id,
        "run_name": run.info.run_name,
        "checkpoint": run.data.tags.get("lipsweep.trial.checkpoint"),
        "selected_by": selected_by,
    }
    mean, std = model_normalization(cfg.model)
    config = build_config_json(flat, mean, std, source)
    ordered = {k: metrics[k] for k in SPEC_METRICS if k in metrics}
    ordered.update({k: v for k, v in sorted(metrics.items()) if k not in ordered})
    return write_export(out, state, config, ordered, force=force)


CHAMPION = "champion"
"""Alias of the registered version that ``export --register`` made last."""


@dataclass(frozen=True)
class RegisteredExport:
    """What ``export --register`` made: a registered version and the LoggedModel behind it."""

    version: str
    model_uri: str
    """``models:/<model_id>``: the LoggedModel on the trial's run (its Models tab)."""


def register_export(tracker: Tracker, run_id: str, folder: Path, name: str) -> RegisteredExport:
    """Log the export as an MLflow 3 LoggedModel on its trial run ``run_id`` (the run's Models
    tab; a pyfunc, see :func:`lipsweep.tracking.model.log_export_model`, with the run's final
    metrics linked to it) and register that model as a new version of ``name``, aliased
    :data:`CHAMPION`, with the export's model card (less its Hugging Face YAML header) as its
    description. ``mlflow.pyfunc.load_model("models:/NAME@champion")`` then predicts logits."""
    from lipsweep.decide.export import card_body
    from lipsweep.tracking.model import log_export_model
    from lipsweep.vit.export_format import model_io

    io = model_io(folder)
    logged = log_export_model(
        tracker, run_id, folder, io["img_size"], io["num_classes"], io["format"]
    )
    card = (folder / "README.md").read_text() if (folder / "README.md").is_file() else ""
    card = card_body(card)
    version = tracker.register_model_version(
        name,
        logged.uri,
        run_id,
        description=card,
        alias=CHAMPION,
        model_id=logged.model_id,
    )
    _log.info("registered %s version %s (alias %s) from %s", name, version, CHAMPION, logged.uri)
    return RegisteredExport(version, logged.uri)
