"""Can early stopping work on a recorded grid? Two figures per objective, from the table alone.

`lipsweep bench-search` replays methods; this says *why* a grid lets them save compute or not
(docs/benchmarks.md, "The recorded grids and the replay"). For each objective NAME:max|min:

- **separation**: the spread of the configurations' seed-mean final values (their standard
  deviation) over the noise of one such mean (the mean within-configuration seed standard
  deviation / sqrt(seeds)). Below about 2, which configuration ends on the front is mostly the
  draw of the seeds, and no method can find it early.
- **Spearman rho per epoch**: the rank correlation, over configurations, between the seed-mean
  per-epoch counterpart that ``moasha`` stops on (the column itself when it is per-epoch, else
  ``probe_<name>``: lipsweep.search.replay.table.stop_metrics) at epoch e and the seed-mean final
  objective. A rung at epoch e can only keep the right configurations where rho is high.

It also lists the grid's Pareto front (seed-mean final objectives) and how its hypervolume
is held, per front configuration: the fraction of the grid's hypervolume it reaches **alone**
and what is left **without** it (what bench-search scores). One configuration holding most of
it alone, inside seed noise, is a needle no method finds early; many configurations each
holding little alone mean a method must finish most of them.

Last, what the best a stopping rule can do costs: the **oracle** that stops every configuration
off the front at the first rung and runs the front in full, with a configuration's seeds started
together (as ``bench-search`` runs them: a stop costs every seed's epochs up to the rung) or its
lead seed alone judged first (:func:`lipsweep.search.replay.oracle.oracle_stopping`, which
``bench-search`` reports as ``oracle_compute_fraction``). Its share of compute on stopped
configurations is a floor for a rule that spends no more: a rule below it finishes
configurations off the front.

    .venv/bin/python benchmarks/grid_signal.py --table benchmarks/data/wide_grid.csv \\
        --objective acc_clean:max --objective acc_pgd_4:max --objective lip_jacobian_median:min
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lipsweep.core.config_base import ConfigError  # noqa: E402
from lipsweep.core.dominance import non_dominated_ranks  # noqa: E402
from lipsweep.core.hypervolume import relative_hypervolume  # noqa: E402
from lipsweep.decide.pareto import parse_objective  # noqa: E402
from lipsweep.search.replay.oracle import oracle_stopping  # noqa: E402
from lipsweep.search.replay.table import (  # noqa: E402
    Table,
    check_objectives,
    load_table,
    stop_metrics,
)


def separation(table: Table, name: str) -> float:
    """The spread of the configurations' seed-mean final ``name`` (sample standard deviation)
    over the noise of one seed mean (mean over configurations of seed std / sqrt(seeds))."""
    final = np.array([table.objectives(c, [name])[0] for c in table.configs])
    noise = np.mean(
        [
            np.std([table.final_value(c, s, name) for s in c.seeds], ddof=1) / np.sqrt(len(c.seeds))
            for c in table.configs
        ]
    )
    return float(np.std(final, ddof=1) / noise) if noise > 0 else math.inf


def early_rho(table: Table, name: str, stop: str) -> list[float]:
    """Spearman's rho over configurations between the seed-mean ``stop`` at epochs
    1..E-1 and the seed-mean final ``name``."""
    final = [table.objectives(c, [name])[0] for c in table.configs]
    return [
        float(
            spearmanr([np.mean([c.metrics[s][stop][e] for s in c.seeds]) for c in table.configs],
                      final).statistic
        )
        for e in range(table.epochs - 1)
    ]  # fmt: skip


def front_shares(
    table: Table, objectives: list[tuple[str, str]]
) -> list[tuple[str, np.ndarray, float, float]]:
    """Per configuration on the grid's front: (key, seed-mean objectives, the grid's relative
    hypervolume it reaches alone, the relative hypervolume of the grid without it)."""
    names, dirs = [n for n, _ in objectives], [d for _, d in objectives]
    values = np.array([table.objectives(c, names) for c in table.configs])  # (n, m)
    front = np.flatnonzero(non_dominated_ranks(values, dirs) == 1)
    return [
        (
            table.configs[i].key,
            values[i],
            relative_hypervolume(values[[i]], values, dirs),
            relative_hypervolume(np.delete(values, i, axis=0), values, dirs),
        )
        for i in front
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", required=True)
    ap.add_argument("--objective", action="append", required=True, metavar="NAME:max|min")
    args = ap.parse_args()
    try:  # bench-search's own checks: one line and exit 2 on a bad table or objective
        table = load_table(args.table)
        objectives = [(o.name, o.direction) for o in map(parse_objective, args.objective)]
        check_objectives(table, objectives)
        stops = stop_metrics(table, objectives, [])
    except ConfigError as exc:
        print(f"grid_signal: {exc}", file=sys.stderr)
        return 2
    seeds = min(len(c.seeds) for c in table.configs)
    n = len(table.configs)
    print(f"{args.table}: {n} configurations, {seeds}+ seeds, {table.epochs} epochs")
    header = " | ".join(f"epoch {e}" for e in range(1, table.epochs))
    print(f"| objective | per-epoch column | separation | {header} |")
    print("|---|---|---:|" + "---:|" * (table.epochs - 1))
    for (name, _), (stop, _) in zip(objectives, stops):
        rhos = " | ".join(f"{r:+.2f}" for r in early_rho(table, name, stop))
        print(f"| `{name}` | `{stop}` | {separation(table, name):.1f} | {rhos} |")
    names = [n for n, _ in objectives]
    shares = front_shares(table, objectives)
    print(
        f"front ({len(shares)} of {n}): " + ", ".join(names)
        + "; the grid's hypervolume reached by it alone | left without it"
    )  # fmt: skip
    for key, v, alone, without in shares:
        print(f"  {key}: " + ", ".join(f"{x:.3g}" for x in v) + f"; {alone:.3f} | {without:.3f}")
    for how, (share, spent) in oracle_stopping(table, objectives).items():
        print(
            f"oracle, every configuration off the front stopped at epoch 1, {how}: "
            f"{share:.1%} of its compute on stopped configurations, {spent:.1%} of the grid's"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
