"""What the table allows to a search that knows every configuration's final objectives: the
grid's front (:func:`front_keys`), the greedy informed order and the oracle that stops every
configuration off the front."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from lipsweep.core.dominance import non_dominated_ranks
from lipsweep.core.hypervolume import hypervolume, reference_point
from lipsweep.search.replay.table import Config, Table


def informed_order(table: Table, objectives: Sequence[tuple[str, str]]) -> list[Config]:
    """A searcher that knows every configuration's final objectives (a reference, not a
    method): the configurations greedily by the hypervolume each adds, per worker-second it
    costs, to those before it, then the ones that add nothing, in the table's order. Run in
    full, it shows what the table allows within a budget to a search that needs no
    exploration; the greedy order is a schedule, not the best subset (that is a knapsack)."""
    names, dirs = [n for n, _ in objectives], [d for _, d in objectives]
    points = {c.key: table.objectives(c, names) for c in table.configs}
    cost = {c.key: sum(float(s.sum()) for s in c.seconds.values()) for c in table.configs}
    ref = reference_point(np.array(list(points.values())), dirs)
    chosen: list[Config] = []
    left = list(table.configs)
    volume = 0.0
    while left:
        gains = [
            hypervolume(np.array([points[c.key] for c in chosen + [c]]), dirs, ref) - volume
            for c in left
        ]
        best = max(range(len(left)), key=lambda i: (gains[i] / cost[left[i].key], -i))
        if gains[best] <= 0:
            break
        volume += gains[best]
        chosen.append(left.pop(best))
    return chosen + left


def front_keys(table: Table, objectives: Sequence[tuple[str, str]]) -> list[str]:
    """The configurations on the grid's front: non-dominated in seed-mean final objectives."""
    names, dirs = [n for n, _ in objectives], [d for _, d in objectives]
    values = np.array([table.objectives(c, names) for c in table.configs])
    ranks = non_dominated_ranks(values, dirs)
    return [c.key for c, r in zip(table.configs, ranks) if r == 1]


def oracle_stopping(
    table: Table, objectives: Sequence[tuple[str, str]], rung: int = 1
) -> dict[str, tuple[float, float]]:
    """The oracle that stops every configuration off the grid's front at epoch ``rung`` and
    runs the front in full. Per way of starting a configuration's seeds (``seeds together``:
    every seed of a stopped configuration pays its first ``rung`` epochs, as the replay
    starts them; ``lead seed first``: its first seed alone): the share of the oracle's compute
    spent on stopped configurations, and the oracle's compute as a fraction of the grid's."""
    front = set(front_keys(table, objectives))
    kept = sum(
        float(np.sum(c.seconds[s])) for c in table.configs if c.key in front for s in c.seeds
    )
    off = [c for c in table.configs if c.key not in front]
    stops = {
        "seeds together": sum(float(np.sum(c.seconds[s][:rung])) for c in off for s in c.seeds),
        "lead seed first": sum(float(np.sum(c.seconds[c.seeds[0]][:rung])) for c in off),
    }
    return {k: (v / (v + kept), (v + kept) / table.compute) for k, v in stops.items()}
