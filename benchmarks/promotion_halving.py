"""Would pausing trials at rungs (ASHA's promotion form) beat ``moasha``'s stopping form? A
what-if replay.

ASHA as its paper states it (Li et al., MLSys 2020, Algorithm 2) is promotion-based: a trial
that reaches a rung *pauses* there; a free worker resumes a paused configuration that is in
the top ``floor(n / reduction_factor)`` of its rung's ``n`` recorded configurations (highest
rung first, then the best ordered), and only when none is promotable starts a new one. Ray
Tune's ASHA, and ``moasha``, are its stopping form: a trial not stopped at a rung runs on at
once, so the first configurations of a sweep pass rungs that hold almost nothing.

Here the grid order ``bench-search`` uses feeds the registered ``moasha`` (its core, as the
Tune adapter builds it: :meth:`Bench.rule`), which still stops a configuration dominated
beyond seed noise at each report; on top of it a configuration pauses at each rung until it
is promoted: in its rung's top ``floor(n / reduction_factor)`` in the NSGA-II order
(non-dominated front, then crowding distance), every seed of it then resuming. A paused
configuration is judged again (:meth:`MoAsha._decide`) whenever a worker is free, as its rung
fills. Once the searcher has nothing new, the best paused configuration is resumed rather
than leave a worker idle. Pausing costs no compute here (live, a checkpoint and a restore).

    .venv/bin/python benchmarks/promotion_halving.py                  # docs/benchmarks.md's table
    .venv/bin/python benchmarks/promotion_halving.py --only clean-40x3x20 --reduction-factor 3
    .venv/bin/python benchmarks/promotion_halving.py --only clean-40x3x20 --reduction-factor 2 \
        --replays 10 --breakdown                  # where the compute goes, both forms

It prints one markdown row per reduction factor, one cell per table with
``search_figures.py``'s four figures (50 replays, 4 workers, budget 40%). A what-if, not a
scheduler: building it would need Tune's PAUSE and resume of checkpointed trials.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

REDUCTION_FACTORS = (2.0, 3.0)
TABLES = ("clean-60x3x12", "clean-40x3x20", "seeds-100x5x9", "noisy-60x3x12")


def promotion_order(core: Any, i: int) -> tuple[dict[str, int], int]:
    """Rung ``i``'s configurations -> how many are ordered ahead of each (NSGA-II order), and
    how many the rung promotes: ``floor(n / reduction_factor)`` (ASHA's ``get_job``)."""
    from lipsweep.core.dominance import crowding_distance, non_dominated_ranks

    names, means, _, _ = core.rung_table(i)
    ranks = non_dominated_ranks(means, core.modes)
    crowd = np.zeros(len(names))
    for r in np.unique(ranks):
        front = np.flatnonzero(ranks == r)
        crowd[front] = crowding_distance(means[front])
    ahead = {
        g: int(np.sum((ranks < ranks[k]) | ((ranks == ranks[k]) & (crowd > crowd[k]))))
        for k, g in enumerate(names)
    }
    return ahead, math.floor(len(names) / core.reduction_factor)


def replay_once(bench: Any, seed: int, pause: bool = True) -> tuple[Any, dict[str, float]]:
    """One replay (a :class:`lipsweep.search.replay.simulation.Replay`) of promotion-based
    halving, and where its compute went (:func:`breakdown`); ``pause`` False: the stopping
    form, which gives ``bench-search``'s ``moasha`` figures."""
    from lipsweep.search.replay.methods import parse_method
    from lipsweep.search.replay.simulation import Tally

    table, method = bench.table, parse_method("moasha")
    search, rule = bench.search(method, seed), bench.rule(method, seed)
    core, tally = rule.core, Tally(table, search, bench.objectives)
    rung_of = {int(round(r)): i for i, r in enumerate(core.rungs)}
    events: list[tuple[float, int, str]] = []
    running: dict[str, tuple[Any, str, str, int]] = {}  # trial -> (config, seed, group, epochs)
    paused: dict[str, tuple[Any, str, str, int, int]] = {}  # ... and the rung it waits at
    promoted: dict[str, set[int]] = {}  # group -> rungs it was promoted past
    group_of: dict[str, str] = {}  # config key -> the rule's group
    judged: dict[tuple[str, int], int] = {}  # (group, rung) -> core.changes when last judged
    now, order, free, exhausted = 0.0, 0, bench.workers, False

    def start(trial: str, config: Any, seed_: str, group: str, epochs: int) -> None:
        nonlocal order, free
        running[trial] = (config, seed_, group, epochs)
        heapq.heappush(events, (now + float(config.seconds[seed_][epochs]), order, trial))
        order, free = order + 1, free - 1

    def promotable(force: bool) -> str | None:
        """A paused trial to resume: its configuration promoted (or, ``force``, the best)."""
        for trial, (config, seed_, group, _, i) in list(paused.items()):
            if group not in core.stopped and judged.get((group, i)) != core.changes:
                judged[(group, i)] = core.changes  # judged again only once records change
                why = core._decide(i, group)
                if why is not None:
                    core.stopped[group] = why
            if group in core.stopped:
                del paused[trial]
                rule.report(trial)
                tally.end(trial, config, seed_, completed=False)
        best: tuple[tuple[int, int, str], str] | None = None
        orders: dict[int, tuple[dict[str, int], int]] = {}
        for trial, (_, _, group, _, i) in paused.items():
            if i in promoted.get(group, set()):
                key = (-i, -1, trial)
            else:
                ahead, kept = orders.setdefault(i, promotion_order(core, i))
                if ahead[group] >= kept and not force:
                    continue
                key = (-i, ahead[group], trial)
            if best is None or key < best[0]:
                best = (key, trial)
        return None if best is None else best[1]

    while True:
        while free > 0:
            trial = promotable(force=False)
            if trial is None and not exhausted:
                drawn = tally.draw(rule)
                if drawn is None:
                    exhausted = True
                    continue
                trial, config, seed_, group, may_start = drawn
                group_of[config.key] = group
                if may_start:
                    start(trial, config, seed_, group, 0)
                continue
            if trial is None:
                trial = promotable(force=not events)
            if trial is None:
                break
            config, seed_, group, epochs, i = paused.pop(trial)
            promoted.setdefault(group, set()).add(i)
            start(trial, config, seed_, group, epochs)
        if not events:
            if paused:
                continue
            break
        now, _, trial = heapq.heappop(events)
        config, seed_, group, epochs = running.pop(trial)
        epochs += 1
        free += 1
        if not tally.epoch(trial, rule, config, seed_, group, epochs):
            continue
        i = rung_of.get(epochs)
        if pause and i is not None and i not in promoted.get(group, set()):
            paused[trial] = (config, seed_, group, epochs, i)
            continue
        start(trial, config, seed_, group, epochs)
    stopped_at = {g: why.epoch for g, why in core.stopped.items()}
    return tally.close(), breakdown(tally, group_of, stopped_at)


def breakdown(
    tally: Any, group_of: dict[str, str], stopped_at: dict[str, float]
) -> dict[str, float]:
    """Shares of a replay's compute (``tally``, a :class:`lipsweep.search.replay.simulation.Tally`):
    configurations on the grid's front or off it, run in full or stopped (at which rung's
    epoch)."""
    from lipsweep.core.dominance import non_dominated_ranks

    configs = tally.table.configs
    ranks = non_dominated_ranks(tally.grid_front, tally.dirs)
    front = {c.key for c, r in zip(configs, ranks) if r == 1}
    total = sum(tally.cost.values())
    shares: dict[tuple[str, float], float] = {}
    for key, seconds in tally.cost.items():
        where = "on front" if key in front else "off front"
        epoch = stopped_at.get(group_of[key], math.inf)
        shares[(where, epoch)] = shares.get((where, epoch), 0.0) + seconds / total
    return {
        f"{where}, " + ("full" if math.isinf(epoch) else f"stopped at epoch {epoch:g}"): share
        for (where, epoch), share in sorted(shares.items())
    }


def main() -> None:
    import search_figures

    from lipsweep.search import replay

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=TABLES, help="one table (repeatable)")
    parser.add_argument("--reduction-factor", type=float, action="append")
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument(
        "--breakdown", action="store_true",
        help="also print where the compute went, stopping form and promotion form (means)",
    )  # fmt: skip
    args = parser.parse_args()
    names = args.only or list(TABLES)
    cells: dict[float, list[str]] = {}
    for name in names:
        for rf in args.reduction_factor or REDUCTION_FACTORS:
            bench = dataclasses.replace(search_figures._bench(name, 4), reduction_factor=rf)
            for pause in (True, False) if args.breakdown else (True,):
                runs = [replay_once(bench, seed, pause) for seed in range(args.replays)]
                if pause:
                    figures = search_figures._figures(replay._scores([r for r, _ in runs], 0.4))
                    cells.setdefault(rf, []).append(", ".join(figures))
                if args.breakdown:
                    form = "promotion" if pause else "stopping"
                    mean: dict[str, float] = {}
                    for _, shares in runs:
                        for what, share in shares.items():
                            mean[what] = mean.get(what, 0.0) + share / len(runs)
                    shown = "; ".join(f"{w} {v:.1%}" for w, v in mean.items())
                    print(f"{name}, reduction factor {rf:g}, {form} form: {shown}")
    print("| reduction factor | " + " | ".join(names) + " |")
    print("|---:|" + "---|" * len(names))
    for rf, row in cells.items():
        print(f"| {rf:g} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
