"""What ``bench-search`` writes: each method's entry of ``summary.json`` (:func:`_scores`), the
hypervolume plot, and the files (:func:`write`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from lipsweep.search.replay.methods import REFERENCES
from lipsweep.search.replay.simulation import Replay

TARGET = 0.9
"""``compute_fraction_to_90``: the compute at which a replay first reaches this fraction."""
KEPT = 0.99
"""A replay keeps the front when its ``final_hv_fraction`` is at least this ("front kept")."""


def _median(values: Sequence[Optional[float]]) -> Optional[float]:
    """The median, None counting as never (above every number); None if most are None."""
    xs = sorted(values, key=lambda v: math.inf if v is None else v)
    mid = xs[(len(xs) - 1) // 2 : len(xs) // 2 + 1]
    if any(v is None for v in mid):
        return None
    return float(np.mean(mid))


def _scores(rs: Sequence[Replay], budget: float) -> dict[str, Any]:
    """One method's (or reference's) entry of ``summary.json`` (per-replay values as they
    are, unrounded)."""
    at = [r.hv_at(budget) for r in rs]
    return {
        "hv_fraction_at_budget": {
            "median": _median(at),
            "share_at_least_0.8": sum(h >= 0.8 - 1e-12 for h in at) / len(at),
            "per_replay": at,
        },
        "compute_fraction_to_90": {
            "median": _median([r.compute_to(TARGET) for r in rs]),
            "per_replay": [r.compute_to(TARGET) for r in rs],
        },
        "stopped_configurations": {"median": _median([r.stopped for r in rs])},
        "stopped_compute_share": {
            "median": _median([r.stopped_share for r in rs]),
            "per_replay": [r.stopped_share for r in rs],
        },
        "final_hv_fraction": {
            "median": _median([r.final_hv for r in rs]),
            "per_replay": [r.final_hv for r in rs],
        },
        "total_compute_fraction": {
            "median": _median([r.spent for r in rs]),
            "per_replay": [r.spent for r in rs],
        },
        "front_configurations_stopped": {
            "median": _median([float(r.front_stopped) for r in rs]),
            "per_replay": [r.front_stopped for r in rs],
        },
    }


def front_kept(entry: Mapping[str, Any]) -> float:
    """The share of a method's replays (its summary entry) whose ``final_hv_fraction`` is at
    least :data:`KEPT`."""
    per = entry["final_hv_fraction"]["per_replay"]
    return sum(h >= KEPT - 1e-12 for h in per) / len(per)


def plot(runs: Mapping[str, Sequence[Replay]], budget: float, path: Path) -> Path:
    """Median hypervolume fraction against compute fraction, one line per method (and
    dashed, per reference)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.linspace(0, 1, 201)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, rs in runs.items():
        curves = [[r.hv_at(c) for c in grid] for r in rs]
        style = {"linestyle": "--", "linewidth": 1} if name in REFERENCES else {}
        label = f"{name} (knows the finals)" if name in REFERENCES else name
        ax.step(grid, np.median(curves, axis=0), where="post", label=label, **style)
    ax.axvline(budget, color="#999999", linestyle=":", linewidth=1)
    ax.axhline(TARGET, color="#999999", linestyle=":", linewidth=1)
    ax.set_xlabel("compute (fraction of the whole grid's worker-seconds)")
    ax.set_ylabel("hypervolume (fraction of the grid's front)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Search methods replayed on the recorded grid (median over replays)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write(summary: Mapping[str, Any], runs: Mapping[str, Sequence[Replay]], out: Path) -> Path:
    """``out/summary.json`` and ``out/hypervolume.png``; returns the summary's path."""
    from lipsweep.core.paths import write_atomic

    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(summary, indent=2, sort_keys=True, allow_nan=False) + "\n"
    write_atomic(out / "summary.json", text)  # a failed write keeps the previous file
    plot(runs, float(summary["budget"]), out / "hypervolume.png")
    return out / "summary.json"
