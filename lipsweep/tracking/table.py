"""The Pareto ranking as an MLflow table artifact (what ``mlflow.log_table`` writes).

MLflow's table artifacts are JSON in pandas' ``split`` orientation (``columns`` + ``data``),
announced on the run by the ``mlflow.loggedArtifacts`` tag; the UI then lists them as tables
(and ``MlflowClient.load_table`` reads them). ``log_table`` itself appends rows to an existing
file, so ``lipsweep pareto`` run twice would duplicate them: this module writes the whole file
each time instead, and adds the tag entry only once.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

TABLE_FILE = "pareto_table.json"
LOGGED_ARTIFACTS_TAG = "mlflow.loggedArtifacts"  # mlflow.utils.mlflow_tags.MLFLOW_LOGGED_ARTIFACTS


def param_columns() -> tuple[str, ...]:
    """``regularizer``, every registered regularizer's shown settings, then ``seed``."""
    from lipsweep.regularizers import shown_params

    return ("regularizer", *dict.fromkeys(shown_params()), "seed")


def pareto_table(
    records: Sequence[Mapping[str, Any]], ranks: Sequence[int], objectives: Sequence[Any]
) -> dict[str, list]:
    """``{"columns", "data"}``: one row per run, best rank first (rank 1 = the front)."""
    names = [getattr(o, "name", str(o)) for o in objectives]
    cols = param_columns()
    columns = ["pareto_rank", "pareto", "run_id", "run_name", *cols, *names]
    rows = []
    for rec, rank in sorted(zip(records, ranks), key=lambda p: (int(p[1]), p[0]["run_id"])):
        params, metrics = rec.get("params", {}), rec.get("metrics", {})
        vals = [metrics.get(n) for n in names]
        rows.append(
            [
                int(rank),
                int(rank) == 1,
                rec["run_id"],
                rec.get("run_name", ""),
                *[params.get(p) for p in cols],
                *[v if v is None or math.isfinite(v) else None for v in vals],
            ]
        )
    return {"columns": columns, "data": rows}


def write_table(folder: Path, table: Mapping[str, list]) -> Path:
    path = Path(folder) / TABLE_FILE
    path.write_text(json.dumps(table, indent=1))
    return path


def logged_artifacts_tag(current: str | None, artifact_file: str) -> str | None:
    """The new ``mlflow.loggedArtifacts`` value announcing ``artifact_file`` as a table, or
    None when ``current`` already does."""
    try:
        entries = json.loads(current or "[]")
    except ValueError:
        entries = []
    entry = {"path": artifact_file, "type": "table"}
    if not isinstance(entries, list) or entry in entries:
        return None if isinstance(entries, list) else json.dumps([entry])
    return json.dumps([*entries, entry])
