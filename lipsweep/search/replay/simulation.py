"""The replay's simulation: ``workers`` simulated workers run a searcher's trials epoch by epoch
while a scheduler's rule decides (:func:`simulate`), and the bookkeeping any what-if simulator
shares (:class:`Tally`) into one trajectory (:class:`Replay`)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from lipsweep.core.hypervolume import relative_hypervolume
from lipsweep.search.protocol import CONTINUE, SEED_KEY
from lipsweep.search.replay.oracle import front_keys
from lipsweep.search.replay.table import Config, Table


@dataclass
class Replay:
    """One replay's trajectory: after each configuration that ran its full budget, the
    compute spent so far (fraction of the grid's) and the relative hypervolume reached; how
    many configurations were stopped, and the compute (fraction of the grid's) spent in all
    and on configurations that were stopped."""

    compute: list[float] = field(default_factory=list)
    hv: list[float] = field(default_factory=list)
    stopped: int = 0
    spent: float = 0.0
    spent_on_stopped: float = 0.0
    front_stopped: int = 0
    """Configurations on the grid's front (seed-mean final objectives) that were stopped."""

    @property
    def final_hv(self) -> float:
        """The hypervolume fraction of the run's own front once it has ended."""
        return max(self.hv, default=0.0)

    def hv_at(self, budget: float) -> float:
        """The hypervolume fraction reached within ``budget`` of the grid's compute."""
        got = [h for c, h in zip(self.compute, self.hv) if c <= budget + 1e-12]
        return max(got, default=0.0)

    def compute_to(self, target: float) -> Optional[float]:
        """The compute fraction at which the hypervolume first reached ``target``, or None."""
        return next((c for c, h in zip(self.compute, self.hv) if h >= target - 1e-12), None)

    @property
    def stopped_share(self) -> float:
        """The share of this method's compute spent on configurations it stopped."""
        return self.spent_on_stopped / self.spent if self.spent > 0 else 0.0


class Tally:
    """A replay's bookkeeping (:func:`simulate`'s, and any what-if simulator's): compute as it
    is spent, each trial's end told to the searcher (``search``; None: no searcher to tell),
    and a configuration's outcome once all its seeds have ended, into :attr:`out`. With a
    searcher, :meth:`draw` and :meth:`epoch` are a trial's start and per-epoch report, the same
    for every simulator; the simulator keeps the clock and the workers."""

    def __init__(
        self, table: Table, search: Optional[Any], objectives: Sequence[tuple[str, str]]
    ) -> None:
        self.table, self.search = table, search
        self.names = [n for n, _ in objectives]
        self.dirs = [d for _, d in objectives]
        self.grid_front = np.array([table.objectives(c, self.names) for c in table.configs])
        self.on_front = set(front_keys(table, objectives))
        self.by_params = {tuple(c.params[p] for p in table.params): c for c in table.configs}
        self.drawn = 0  # trials asked of the searcher: the next is named f"t{drawn:05d}"
        self.ended: dict[str, int] = {}  # config key -> seeds that ended (any way)
        self.full: dict[str, int] = {}  # config key -> seeds that ran every epoch
        self.cost: dict[str, float] = {}  # config key -> compute spent on it
        self.points: list[np.ndarray] = []
        self.spent = 0.0
        self.out = Replay()

    def spend(self, config: Config, seconds: float) -> None:
        """An epoch of ``config`` ended after ``seconds``."""
        self.spent += seconds
        self.cost[config.key] = self.cost.get(config.key, 0.0) + seconds

    def end(self, trial: str, config: Config, seed: str, completed: bool) -> None:
        """``trial`` (``seed`` of ``config``) ended: ran every epoch, was stopped, or never
        started; the configuration's outcome once all its seeds have."""
        table, key = self.table, config.key
        result = {n: table.final_value(config, seed, n) for n in self.names} if completed else None
        self.ended[key] = self.ended.get(key, 0) + 1
        self.full[key] = self.full.get(key, 0) + completed
        if self.search is not None:
            self.search.report(trial, result)
        if self.ended[key] < len(config.seeds):
            return
        if self.full[key] == len(config.seeds):
            self.points.append(table.objectives(config, self.names))
            self.out.compute.append(self.spent / table.compute)
            self.out.hv.append(
                relative_hypervolume(np.array(self.points), self.grid_front, self.dirs)
            )
        else:
            self.out.stopped += 1
            self.out.front_stopped += key in self.on_front
            self.out.spent_on_stopped += self.cost.get(key, 0.0) / table.compute

    def draw(self, rule: Any) -> Optional[tuple[str, Config, str, str, bool]]:
        """The searcher's next trial: ``(trial, config, seed, group, may_start)``, or None when
        it has none left. One whose configuration ``rule`` has stopped may not start; its end
        (never started) is told here, as the live adapter ends it before it starts."""
        trial = f"t{self.drawn:05d}"
        self.drawn += 1
        flat = self.search.suggest(trial)
        if flat is None:
            return None
        config = self.by_params[tuple(flat[p] for p in self.table.params)]
        seed, group = str(flat[SEED_KEY]), rule.group(trial, flat)
        if rule.decide(trial, group, 0, {}) == CONTINUE:
            return trial, config, seed, group, True
        rule.report(trial)
        self.end(trial, config, seed, completed=False)
        return trial, config, seed, group, False

    def epoch(
        self, trial: str, rule: Any, config: Config, seed: str, group: str, done: int
    ) -> bool:
        """``trial`` ended its ``done``-th epoch: the epoch's compute is spent and its
        per-epoch values go to ``rule``. False when the trial ends there (its last epoch, or
        ``rule`` stopped it, its last epoch's report included: told as ended), True when it
        runs on."""
        self.spend(config, float(config.seconds[seed][done - 1]))
        metrics = {n: float(config.metrics[seed][n][done - 1]) for n in self.table.per_epoch}
        go = rule.decide(trial, group, done, metrics) == CONTINUE
        if go and done < self.table.epochs:
            return True
        rule.report(trial)
        self.end(trial, config, seed, completed=go)
        return False

    def close(self) -> Replay:
        """The replay, once nothing is left to run."""
        self.out.spent = self.spent / self.table.compute
        return self.out


def simulate(
    table: Table,
    search: Any,
    rule: Any,
    objectives: Sequence[tuple[str, str]],
    workers: int,
) -> Replay:
    """Run ``search`` (a searcher member, each configuration once per seed: :class:`Repeats`
    over a :class:`TableMember`) and ``rule`` (a scheduler: :class:`CoreRule`, or
    :class:`NoStop`) on ``workers`` simulated workers until nothing is left.

    Events are epoch ends, in time order (ties by start order). A free worker takes the
    searcher's next trial (a configuration's seeds come one after another); a trial whose
    configuration the rule has stopped is never started. A trial the rule stops at a report,
    its last epoch's included, is stopped there (as the live sweep kills it before its final
    report); compute counts each epoch when it ends."""
    tally = Tally(table, search, objectives)
    events: list[tuple[float, int, str]] = []
    running: dict[str, tuple[Config, str, str, int]] = {}  # trial -> (config, seed, group, done)
    now, order, free, exhausted = 0.0, 0, workers, False

    while True:
        while free > 0 and not exhausted:
            drawn = tally.draw(rule)
            if drawn is None:
                exhausted = True
                break
            trial, config, seed, group, may_start = drawn
            if not may_start:  # its configuration was stopped
                continue
            running[trial] = (config, seed, group, 0)
            heapq.heappush(events, (now + float(config.seconds[seed][0]), order, trial))
            order += 1
            free -= 1
        if not events:
            break
        now, _, trial = heapq.heappop(events)
        config, seed, group, done = running.pop(trial)
        done += 1
        if not tally.epoch(trial, rule, config, seed, group, done):
            free += 1
            continue
        running[trial] = (config, seed, group, done)
        heapq.heappush(events, (now + float(config.seconds[seed][done]), order, trial))
        order += 1
    return tally.close()
