"""A live `moasha` sweep against the recorded grid.

Runs the recorded grid's space (benchmarks/data/tiny_grid.yaml) as a real lipsweep sweep
(local Ray, SQLite MLflow) with ``scheduler: moasha`` stopping on the same per-epoch
counterparts that ``lipsweep bench-search`` uses by default (``acc_clean`` max,
``probe_acc_pgd_4`` max, ``probe_lip_jacobian_median`` min; grace period 1, reduction factor 2,
``max_t`` = the grid's epochs), on the seeds given (default: seed 0 only, to fit the time
budget). Then it compares with the recorded table restricted to the same seeds:

- compute: the live sweep's worker-seconds (every epoch's training + probe seconds of every
  trial, stopped or not, plus the final evaluation of the finished ones) over the recorded
  grid's for those configurations and seeds;
- hypervolume: of the live sweep's configurations that ran in full (seed-mean final
  ``acc_clean`` max, ``acc_pgd_4`` max, ``lip_jacobian_median`` min), relative to the recorded
  grid's front with that front's reference point (:mod:`lipsweep.core.hypervolume`).

    .venv/bin/python benchmarks/live_moasha.py --num-cpus 2 --out /tmp/live_moasha.json

``--as-written SPACE`` runs a space with its own scheduler and seeds instead (e.g.
benchmarks/data/live_moasha_one_seed.yaml: one seed, the PGD probe tied at 0) and compares
with no table: it records every trial's values of the scheduler's metrics and their
standard errors at each rung as the scheduler saw them (its saved state), the rungs at which a
metric was the same for every trial, each stop reason, and whether every stop reason names
the noise it used (seed or measurement noise).

    .venv/bin/python benchmarks/live_moasha.py --as-written \\
        benchmarks/data/live_moasha_one_seed.yaml --out /tmp/live_one_seed.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from record_grid import FINAL_SECONDS, SECONDS, config_key  # noqa: E402

from lipsweep.core.hypervolume import relative_hypervolume  # noqa: E402

_log = logging.getLogger("live_moasha")
DATA = ROOT / "benchmarks" / "data"
OBJECTIVES = (("acc_clean", "max"), ("acc_pgd_4", "max"), ("lip_jacobian_median", "min"))
STOP_ON = (("acc_clean", "max"), ("probe_acc_pgd_4", "max"), ("probe_lip_jacobian_median", "min"))


def live_space(grid_space: Path, seeds: list[int], out: Path) -> Path:
    """The recorded grid's space with ``moasha`` and only ``seeds``."""
    doc = yaml.safe_load(grid_space.read_text())
    doc["name"] = "tiny_moasha"
    doc["description"] = f"live moasha over {grid_space.name}, seeds {seeds}"
    doc["repeat"] = {"seed": seeds}
    doc["scheduler"] = {
        "type": "moasha",
        "metrics": [n for n, _ in STOP_ON],
        "modes": [d for _, d in STOP_ON],
        "grace_period": 1,
        "reduction_factor": 2,
        "confidence": 0.8,
        "max_t": int(doc["fixed"]["epochs"]),
    }
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def live_runs(
    tracking_uri: str, experiment: str
) -> tuple[float, dict[str, list[np.ndarray]], dict[str, str]]:
    """(worker-seconds of every trial run, {config key: [final objectives per full run]},
    {run name: its stop reason, the ``lipsweep.stopped_by`` tag MLflow shows})."""
    from lipsweep.tracking import TAG_STOPPED_BY
    from lipsweep.tracking.reader import TrackingReader
    from lipsweep.tracking.schema import FINISHED, TAG_KIND

    reader = TrackingReader(tracking_uri, experiment)
    compute, full, reasons = 0.0, {}, {}
    for run in reader.search(f"tags.`{TAG_KIND}` = 'trial'"):
        if TAG_STOPPED_BY in run.data.tags:
            reasons[run.info.run_name] = run.data.tags[TAG_STOPPED_BY]
        for key in SECONDS:
            compute += sum(m.value for m in reader.get_metric_history(run.info.run_id, key))
        if run.info.status == FINISHED:
            final = run.data.metrics
            compute += sum(final.get(k, 0.0) for k in FINAL_SECONDS)
            values = np.array([final[n] for n, _ in OBJECTIVES])
            full.setdefault(config_key(run.data.params), []).append(values)
    return compute, full, dict(sorted(reasons.items()))


NOISE_NAMES = ("seed noise", "measurement noise")
"""What a noise-aware stop reason says it stopped beyond (:meth:`StopReason.text`)."""


def as_written_runs(
    tracking_uri: str, experiment: str, space: Path, storage: str
) -> dict[str, Any]:
    """What a sweep of ``space`` (run as written) did: from MLflow each trial's status and
    stop reason; from the scheduler's saved state (what the rule itself saw) each trial's
    values of the scheduler's metrics and their standard errors at each rung, and the rungs
    at which a metric was the same for every trial there; whether every stop reason names
    the noise it used."""
    from lipsweep.search.schedulers import state_path
    from lipsweep.tracking import TAG_STOPPED_BY
    from lipsweep.tracking.reader import TrackingReader
    from lipsweep.tracking.schema import TAG_KIND

    doc = yaml.safe_load(space.read_text())
    metrics = list(doc["scheduler"]["metrics"])
    state = json.loads(Path(state_path(storage, experiment)).read_text())
    rungs = state["rungs"]
    reader = TrackingReader(tracking_uri, experiment)
    trials: dict[str, dict[str, Any]] = {}
    for run in reader.search(f"tags.`{TAG_KIND}` = 'trial'"):
        tid = run.info.run_name.split()[0]
        seen, ses = state["reported"].get(tid, {}), state["measured"].get(tid, {})
        trials[run.info.run_name] = {
            "status": run.info.status,
            "stopped_by": run.data.tags.get(TAG_STOPPED_BY),
            "at_rungs": {
                f"epoch {rungs[int(i)]:g}": {
                    **{m: round(v, 4) for m, v in zip(metrics, vals)},
                    **{
                        f"{m}_se": None if e is None else round(e, 4)
                        for m, e in zip(metrics, ses.get(i, [None] * len(metrics)))
                    },
                }  # fmt: skip
                for i, vals in sorted(seen.items())
            },
        }
    trials = dict(sorted(trials.items()))
    tied = {}
    for m in metrics:
        by_rung: dict[str, set[float]] = {}
        for t in trials.values():
            for r, vals in t["at_rungs"].items():
                by_rung.setdefault(r, set()).add(vals[m])
        tied[m] = sorted(r for r, vs in by_rung.items() if len(vs) == 1)
    reasons = {n: t["stopped_by"] for n, t in trials.items() if t["stopped_by"]}
    return {
        "trials": len(trials),
        "finished": sum(t["status"] == "FINISHED" for t in trials.values()),
        "stopped": len(reasons),
        "scheduler": doc["scheduler"],
        "seeds": doc.get("repeat", {}).get("seed"),
        "tied_at_rungs": tied,
        "every_stop_names_its_noise": all(
            any(w in r for w in NOISE_NAMES) for r in reasons.values()
        ),
        "stop_reasons": reasons,
        "per_trial": trials,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", default=str(DATA / "tiny_grid.csv"))
    ap.add_argument("--space", default=str(DATA / "tiny_grid.yaml"))
    ap.add_argument("--seed", type=int, action="append", help="repeat; default 0")
    ap.add_argument("--experiment", default="tiny_moasha")
    ap.add_argument("--tracking-uri", default=f"sqlite:///{DATA / 'tiny_moasha_mlflow.db'}")
    ap.add_argument("--storage", default=str(DATA / "tiny_moasha_ray"))
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--compare-only", action="store_true", help="only re-read MLflow")
    ap.add_argument("--out", default=None, help="JSON of the figures")
    ap.add_argument(
        "--as-written",
        metavar="SPACE",
        default=None,
        help="run SPACE with its own scheduler and seeds and record what it did (module "
        "docstring); no table",
    )
    args = ap.parse_args()
    if args.as_written:
        return main_as_written(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    seeds = args.seed or [0]
    from lipsweep.search.replay.table import load_table

    table = load_table(args.table)  # first: a missing table fails before hours of training
    wall = None
    if not args.compare_only:
        # beside Ray's state, not in a temporary folder: the driver's resume hint names it
        Path(args.storage).mkdir(parents=True, exist_ok=True)
        space = live_space(
            Path(args.space), seeds, Path(args.storage) / f"{args.experiment}.space.yaml"
        )
        wall, code = _sweep(args, space)
        if code is not None:  # nothing to compare yet: the same command with --resume
            return code
    compute, full, reasons = live_runs(args.tracking_uri, args.experiment)

    chosen = {str(s) for s in seeds}
    grid_compute = sum(
        float(c.seconds[s].sum()) for c in table.configs for s in c.seeds if s in chosen
    )
    dirs = [d for _, d in OBJECTIVES]
    names = [n for n, _ in OBJECTIVES]
    front = np.array(
        [
            np.mean(
                [[table.final_value(c, s, n) for n in names] for s in c.seeds if s in chosen], 0
            )
            for c in table.configs
        ]
    )
    live = np.array([np.mean(v, 0) for v in full.values()]) if full else np.empty((0, len(names)))
    figures = {
        "seeds": seeds,
        "configurations": len(table.configs),
        "ran_in_full": len(full),
        "live_compute_s": round(compute, 1),
        "grid_compute_s": round(grid_compute, 1),
        "compute_ratio": round(compute / grid_compute, 4),
        "hv_ratio": round(relative_hypervolume(live, front, dirs), 4),
        "wall_s": None if wall is None else round(wall, 1),
        "stop_on": [f"{n}:{d}" for n, d in STOP_ON],
        "objectives": [f"{n}:{d}" for n, d in OBJECTIVES],
        "stop_reasons": reasons,
    }
    _log.info("%s", json.dumps(figures))
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def _sweep(args: argparse.Namespace, space: Path) -> tuple[float, Optional[int]]:
    """Sweep ``space`` as the flags say; (wall seconds, the exit code when it was interrupted,
    else None)."""
    from lipsweep import api
    from lipsweep.sweep.signals import exit_code

    t0 = time.perf_counter()
    result = api.sweep(
        space=str(space),
        experiment=args.experiment,
        tracking_uri=args.tracking_uri,
        storage=args.storage,
        num_cpus=args.num_cpus,
        resume=args.resume,
    )
    wall = time.perf_counter() - t0
    if result.interrupted:
        _log.warning(
            "live sweep interrupted after %.0f s (%s); rerun this command with --resume",
            wall, result.counts,
        )  # fmt: skip
        return wall, exit_code(result.signal) if result.signal else 1
    _log.info("live sweep: %s in %.0f s", result.counts, wall)
    return wall, None


def main_as_written(args: argparse.Namespace) -> int:
    """``--as-written SPACE``: SPACE swept as written, read back (:func:`as_written_runs`)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    space = Path(args.as_written)
    wall = None
    if not args.compare_only:
        Path(args.storage).mkdir(parents=True, exist_ok=True)
        wall, code = _sweep(args, space)
        if code is not None:
            return code
    figures = {"space": space.name, "wall_s": None if wall is None else round(wall, 1)}
    figures |= as_written_runs(args.tracking_uri, args.experiment, space, args.storage)
    _log.info("%s", json.dumps({k: v for k, v in figures.items() if k != "per_trial"}))
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
