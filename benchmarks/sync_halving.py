"""Would judging a rung synchronously beat ``moasha``'s asynchronous rule? A what-if replay.

Synchronous successive halving in brackets (Hyperband's inner loop; Li et al. 2018), with
``moasha``'s own rung decision: the configurations are taken in a replay's grid order, ``B``
at a time; every seed of every configuration of a bracket runs to the first rung, then each
configuration is judged (:meth:`MoAsha._decide`, the noise-aware test on the rung's whole
table, earlier brackets' records included), the survivors run to the next rung, and so on;
the last survivors run to the end. Compute counts every epoch run; a configuration's point
joins the front when its last seed ends, in compute order (a bracket's configurations finish
one after another, as on one worker: the figures are in compute, not wall time, as
``bench-search``'s are). Stopped compute is the compute of configurations that were stopped.

    .venv/bin/python benchmarks/sync_halving.py                       # docs/benchmarks.md's table
    .venv/bin/python benchmarks/sync_halving.py --only clean-40x3x20 --bracket 8

It prints one markdown row per bracket size and confidence, one cell per table with
``search_figures.py``'s four figures (50 replays, budget 40%). A what-if, not a scheduler:
building it would need Tune's PAUSE and resume of checkpointed trials.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

BRACKETS = (8, 16, 0)  # 0: the whole grid in one bracket (plain successive halving)
CONFIDENCES = (0.8, 0.9)
TABLES = ("clean-60x3x12", "clean-40x3x20", "seeds-100x5x9", "noisy-60x3x12")


def replay_once(bench: Any, seed: int, bracket: int, confidence: float) -> Any:
    """One replay (a :class:`lipsweep.search.replay.simulation.Replay`) of synchronous halving."""
    from lipsweep.search.replay.members import grid_order
    from lipsweep.search.replay.simulation import Tally
    from lipsweep.search.schedulers.moasha import MoAsha

    table = bench.table
    stops = [n for n, _ in bench.stops]
    core = MoAsha(
        stops, [d for _, d in bench.stops], bench.grace_period, bench.reduction_factor,
        table.epochs, {c.key: len(c.seeds) for c in table.configs}, confidence,
        len(bench.seeds),
    )  # fmt: skip
    tally = Tally(table, None, bench.objectives)
    order = grid_order(table, seed)
    size = bracket or len(order)

    def run(config: Any, upto: int, done: dict[str, int]) -> None:
        for s in config.seeds:
            tally.spend(config, float(np.sum(config.seconds[s][done[config.key] : upto])))
        done[config.key] = upto

    def end(config: Any, completed: bool) -> None:
        for s in config.seeds:
            tally.end(f"{config.key}|{s}", config, s, completed)

    for start in range(0, len(order), size):
        alive = order[start : start + size]
        done = {c.key: 0 for c in alive}
        for c in alive:
            for s in c.seeds:
                core.add(f"{c.key}|{s}", c.key)
        for i, rung in enumerate(core.rungs):
            for c in alive:
                run(c, int(rung), done)
                for s in c.seeds:
                    values = [float(c.metrics[s][m][int(rung) - 1]) for m in stops]
                    core.reported[f"{c.key}|{s}"][i] = values
            survivors = []
            for c in alive:  # judged on the rung's whole table
                why = core._decide(i, c.key)
                if why is None:
                    survivors.append(c)
                    continue
                core.stopped[c.key] = why
                end(c, completed=False)
            alive = survivors
        for c in alive:
            run(c, table.epochs, done)
            end(c, completed=True)
    return tally.close()


def main() -> None:
    import search_figures

    from lipsweep.search import replay

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=TABLES, help="one table (repeatable)")
    parser.add_argument("--bracket", type=int, action="append", help="bracket size, 0: all")
    parser.add_argument("--confidence", type=float, action="append")
    parser.add_argument("--replays", type=int, default=50)
    args = parser.parse_args()
    names = args.only or list(TABLES)
    cells: dict[tuple[int, float], list[str]] = {}
    for name in names:
        bench = search_figures._bench(name, 4)
        for bracket in args.bracket or BRACKETS:
            for confidence in args.confidence or CONFIDENCES:
                runs = [
                    replay_once(bench, seed, bracket, confidence) for seed in range(args.replays)
                ]
                figures = search_figures._figures(replay._scores(runs, 0.4))
                cells.setdefault((bracket, confidence), []).append(", ".join(figures))
    print("| bracket | confidence | " + " | ".join(names) + " |")
    print("|---:|---:|" + "---|" * len(names))
    for (bracket, confidence), row in cells.items():
        print(f"| {bracket or 'all'} | {confidence:g} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
