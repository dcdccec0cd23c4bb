"""Record the ground-truth grid of `lipsweep bench-search`.

Runs the grid (benchmarks/data/tiny_grid.yaml by default) as an ordinary lipsweep sweep
(local Ray, SQLite MLflow), then writes one CSV row per (configuration, seed, epoch) from
MLflow, in the format lipsweep/search/replay/table.py reads:

- ``config``: the configuration's key (its settings, ``regularizer=jasmin|k=10|...``);
- ``param:<setting>``: the configuration's regularizer settings ("" where not applicable);
- ``seed``, ``epoch`` (1..E), ``epoch_seconds``: the epoch's training + probe seconds, and on the
  last epoch also the final evaluation's (attacks + Lipschitz): what a trial costs when it
  runs to the end;
- per-epoch columns: ``acc_clean`` (the epoch's held-out accuracy; on the last row the
  final evaluation's), ``loss``, ``loss_ce``, ``loss_reg`` and every ``probe_*``;
- final columns (last row only): every ``acc_*`` attack accuracy and ``lip_*`` summary.

    .venv/bin/python benchmarks/record_grid.py --num-cpus 2                 # hours
    .venv/bin/python benchmarks/record_grid.py --resume --num-cpus 2        # after a stop
    .venv/bin/python benchmarks/record_grid.py --table-only                 # re-read MLflow

Interrupted sweeps resume (``--resume``); the table is written only when every trial
finished. The wall time goes in benchmarks/data/README.md.
"""

from __future__ import annotations

import argparse
import csv
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lipsweep.core.metric_names import (  # noqa: E402
    ACC_CLEAN,
    ACC_PREFIX,
    EPOCH_ACC_CLEAN,
    LIP_PREFIX,
    LOSS,
    LOSS_CE,
    LOSS_REG,
    is_probe_metric,
)

_log = logging.getLogger("record_grid")
DATA = ROOT / "benchmarks" / "data"
PARAMS = ("regularizer", "k", "lam", "aggregation", "lam_q", "lam_k", "lam_v")
PER_EPOCH = {EPOCH_ACC_CLEAN: ACC_CLEAN, LOSS: LOSS, LOSS_CE: LOSS_CE, LOSS_REG: LOSS_REG}
SECONDS = ("epoch_seconds", "probe_seconds")
FINAL_SECONDS = ("eval_attack_seconds", "eval_lipschitz_seconds")


def config_key(params: dict[str, str]) -> str:
    """A run's ``config`` key: its settings, ``regularizer=jasmin|k=10|...``."""
    return "|".join(f"{p}={params.get(p, '')}" for p in PARAMS)


def table_rows(tracking_uri: str, experiment: str) -> list[dict[str, object]]:
    """One row per (finished child run, epoch), from MLflow."""
    from lipsweep.tracking.reader import TrackingReader

    reader = TrackingReader(tracking_uri, experiment)
    runs = reader.finished_trials()
    if not runs:
        raise SystemExit(f"no finished trials in experiment {experiment!r} at {tracking_uri}")
    rows: list[dict[str, object]] = []
    for run in sorted(runs, key=lambda r: r.info.run_name or ""):
        params, final = run.data.params, run.data.metrics
        keys = [k for k in final if is_probe_metric(k)] + list(PER_EPOCH) + list(SECONDS)
        series = {
            k: {m.step: m.value for m in reader.get_metric_history(run.info.run_id, k)}
            for k in dict.fromkeys(keys)
        }
        epochs = max(series[EPOCH_ACC_CLEAN])
        for e in range(1, epochs + 1):
            row: dict[str, object] = {"config": config_key(params)}
            row.update({f"param:{p}": params.get(p, "") for p in PARAMS})
            row.update(seed=params.get("seed", ""), epoch=e)
            seconds = sum(series[k].get(e, 0.0) for k in SECONDS)
            if e == epochs:
                seconds += sum(final.get(k, 0.0) for k in FINAL_SECONDS)
            row["epoch_seconds"] = round(seconds, 4)
            for key, column in PER_EPOCH.items():
                row[column] = series[key].get(e, "")
            for key in sorted(k for k in series if is_probe_metric(k) and k not in SECONDS):
                row[key] = series[key].get(e, "")
            for key in sorted(final):
                if key.startswith((ACC_PREFIX, LIP_PREFIX)) and key not in row:
                    row[key] = final[key] if e == epochs else ""
            if e == epochs:
                row[ACC_CLEAN] = final.get(ACC_CLEAN, row[ACC_CLEAN])
            rows.append(row)
    return rows


def write_table(rows: list[dict[str, object]], path: Path) -> None:
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--space", default=str(DATA / "tiny_grid.yaml"))
    ap.add_argument("--experiment", default="tiny_grid")
    ap.add_argument("--tracking-uri", default=f"sqlite:///{DATA / 'tiny_grid_mlflow.db'}")
    ap.add_argument("--storage", default=str(DATA / "tiny_grid_ray"))
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--table-only", action="store_true", help="only re-read MLflow")
    ap.add_argument("--out", default=str(DATA / "tiny_grid.csv"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if not args.table_only:
        from lipsweep import api

        t0 = time.perf_counter()
        result = api.sweep(
            space=args.space,
            experiment=args.experiment,
            tracking_uri=args.tracking_uri,
            storage=args.storage,
            num_cpus=args.num_cpus,
            resume=args.resume,
        )
        _log.info("sweep: %s in %.0f s", result.counts, time.perf_counter() - t0)
        if not result.ok:
            _log.error("not every trial finished; rerun with --resume")
            return 1
    rows = table_rows(args.tracking_uri, args.experiment)
    write_table(rows, Path(args.out))
    _log.info("wrote %s: %d rows", args.out, len(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
