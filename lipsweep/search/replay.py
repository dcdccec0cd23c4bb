"""``lipsweep bench-search``: replay search methods on a recorded table.

A recorded table holds, for every configuration of a grid and each of its seeds, every
epoch's seconds and per-epoch metrics (clean accuracy, losses, robustness probes) and, at the
last epoch, the final metrics (PGD, AutoAttack, ‖J_f‖). Replaying a method on it simulates a
sweep on ``workers`` parallel workers: a trial's epochs take the recorded seconds, a
scheduler sees each epoch's values only when that epoch ends (so it cannot peek at the
future), and a searcher learns a configuration's seed-mean final objectives when its last
seed ends. Compute is worker-seconds spent, as a fraction of what the whole grid costs.

The score is the hypervolume of the configurations that ran their full budget (every seed,
every epoch), seed-averaged, relative to the whole grid's front with the reference point of
that front (:mod:`lipsweep.core.hypervolume`). Each method is replayed ``replays`` times with
seeds ``0..replays-1``; the same table, seed and flags give the same summary, to the digit
(per-replay values are kept unrounded).

A method is a registered searcher, optionally with a registered scheduler
(``SEARCHER+SCHEDULER``, plugins included; :func:`parse_method`, :data:`ALIASES`). Both are
built by their registry's factory, as a live sweep builds them, and driven through the
search protocol (:mod:`lipsweep.search.protocol`): the searcher's Tune ``Searcher`` (or its
list of trials, for ``grid`` and ``random``) proposes configurations of the table
(:func:`table_space`, :class:`TableMember`), each run once per seed (``Repeats``, the code the
live sweep's ``repeat:`` runs), and the scheduler's core decides at each epoch's report as
the Tune adapter has it decide (:class:`CoreRule`). Where Syne Tune imports (the
benchmark-only ``bench`` extra), ``syne-moasha`` is a peer from outside lipsweep: the grid
order with Syne Tune's own MO-ASHA deciding (:class:`SyneMoashaRule`).

Beside the methods, two references that know the final values (:data:`REFERENCES`) say what
the table allows: ``informed-order`` (:func:`informed_order`) and ``moasha-told-finals``
(:func:`told_finals`).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import functools
import heapq
import io
import json
import logging
import math
import random as _random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np

from lipsweep.core.config_base import ConfigError, show
from lipsweep.core.dominance import non_dominated_ranks
from lipsweep.core.hypervolume import hypervolume, reference_point, relative_hypervolume
from lipsweep.core.metric_names import ACC_CLEAN, probe_metric
from lipsweep.search.protocol import CONTINUE, SEED_KEY, STOP

_log = logging.getLogger(__name__)

CONFIG = "config"
"""The column holding a configuration's key (any string; one configuration, one key)."""
PARAM_PREFIX = "param:"
"""Optional columns ``param:<setting>`` hold a configuration's settings (the searchers draw
from their values); without them a configuration's one setting is its ``config`` key."""
SEED, EPOCH, SECONDS = "seed", "epoch", "epoch_seconds"
TARGET = 0.9
"""``compute_fraction_to_90``: the compute at which a replay first reaches this fraction."""
KEPT = 0.99
"""A replay keeps the front when its ``final_hv_fraction`` is at least this ("front kept")."""


# -- the table -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    """One configuration: its settings and, per seed, its epochs' seconds and metrics."""

    key: str
    params: Mapping[str, str]
    seeds: tuple[str, ...]
    seconds: Mapping[str, np.ndarray]  # seed -> (epochs,)
    metrics: Mapping[str, Mapping[str, np.ndarray]]  # seed -> name -> (epochs,), NaN = absent


@dataclass(frozen=True)
class Table:
    """A recorded grid (see the module docstring); ``epochs`` is every trial's full budget."""

    params: tuple[str, ...]
    configs: tuple[Config, ...]
    epochs: int
    per_epoch: tuple[str, ...]
    final: tuple[str, ...]

    @property
    def compute(self) -> float:
        """Worker-seconds of the whole grid, every seed and epoch."""
        return float(sum(s.sum() for c in self.configs for s in c.seconds.values()))

    def final_value(self, config: Config, seed: str, name: str) -> float:
        """``name`` at the last epoch of ``config``'s ``seed``."""
        return float(config.metrics[seed][name][-1])

    def objectives(self, config: Config, names: Sequence[str]) -> np.ndarray:
        """The seed-mean final values of ``names`` for ``config``: (len(names),)."""
        return np.array(
            [np.mean([self.final_value(config, s, n) for s in config.seeds]) for n in names]
        )


def load_table(path: str | Path) -> Table:
    """Read a recorded table (CSV: ``config``, ``seed``, ``epoch``, ``epoch_seconds``, then
    one column per metric; optional ``param:<setting>`` columns).

    Every (configuration, seed) must have the epochs 1..E, the same E for all. A metric is
    per-epoch when every row has it, final when only last-epoch rows do. A table without a
    ``config`` column keys each configuration by its ``param:*`` values."""
    path = Path(path)
    rows, lines = _read_rows(path)
    cols = list(rows[0])
    params = tuple(c[len(PARAM_PREFIX) :] for c in cols if c.startswith(PARAM_PREFIX))
    for need in (SEED, EPOCH, SECONDS):
        if need not in cols:
            raise ConfigError("table", f"{path} has no {need!r} column")
    if not params and CONFIG not in cols:
        raise ConfigError(
            "table", f"{path} has neither a {CONFIG!r} nor a {PARAM_PREFIX}<setting> column"
        )
    keyed = CONFIG in cols
    if not params:  # the key is the configuration's one setting
        params = (CONFIG,)
        for row in rows:
            row[PARAM_PREFIX + CONFIG] = row[CONFIG]
    skip = (CONFIG, SEED, EPOCH, SECONDS)
    names = [c for c in cols if not c.startswith(PARAM_PREFIX) and c not in skip]
    trials: dict[tuple[str, str], dict[int, dict[str, str]]] = {}
    first_line: dict[tuple[str, str, int], int] = {}
    for line, row in zip(lines, rows):
        if keyed:
            key = row[CONFIG]
        else:
            key = "|".join(f"{p}={row[PARAM_PREFIX + p]}" for p in params)
        try:
            epoch = int(row[EPOCH])
        except ValueError:
            raise ConfigError("table", f"{path}:{line}: epoch {show(row[EPOCH])}") from None
        seconds = _number(row[SECONDS], path, line, SECONDS)
        if not (math.isfinite(seconds) and seconds > 0):
            raise ConfigError(
                "table", f"{path}:{line}: {SECONDS} must be a positive number of seconds, "
                f"got {show(row[SECONDS])}"
            )  # fmt: skip
        for name in names:
            _number(row[name], path, line, name)
        here = (key, row[SEED], epoch)
        if here in first_line:
            raise ConfigError(
                "table", f"{path}:{line}: a second row for {key} seed {row[SEED]} epoch "
                f"{epoch} (the first is line {first_line[here]})"
            )  # fmt: skip
        first_line[here] = line
        trials.setdefault((key, row[SEED]), {})[epoch] = row
    lengths = {len(e) for e in trials.values()}
    epochs = max(lengths)
    for (key, seed), by_epoch in trials.items():
        if sorted(by_epoch) != list(range(1, epochs + 1)):
            raise ConfigError(
                "table", f"{path}: {key} seed {seed} has epochs {sorted(by_epoch)[:5]}..., "
                f"not 1..{epochs}"
            )  # fmt: skip

    def num(text: str) -> float:
        return float(text) if text != "" else math.nan

    arrays: dict[tuple[str, str], dict[str, np.ndarray]] = {
        t: {n: np.array([num(by_epoch[e][n]) for e in range(1, epochs + 1)]) for n in names}
        | {SECONDS: np.array([num(by_epoch[e][SECONDS]) for e in range(1, epochs + 1)])}
        for t, by_epoch in trials.items()
    }
    per_epoch = tuple(n for n in names if all(np.isfinite(a[n]).all() for a in arrays.values()))
    final = tuple(n for n in names if all(np.isfinite(a[n][-1]) for a in arrays.values()))
    configs = []
    for key in dict.fromkeys(k for k, _ in trials):
        seeds = tuple(s for k, s in trials if k == key)
        first = next(iter(trials[(key, seeds[0])].values()))
        configs.append(
            Config(
                key=key,
                params={p: first[PARAM_PREFIX + p] for p in params},
                seeds=seeds,
                seconds={s: arrays[(key, s)][SECONDS] for s in seeds},
                metrics={s: {n: arrays[(key, s)][n] for n in names} for s in seeds},
            )
        )
    return Table(params, tuple(configs), epochs, per_epoch, final)


def _read_rows(path: Path) -> tuple[list[dict[str, str]], list[int]]:
    """The CSV's rows (as dicts) and each row's line number; ConfigError naming ``--table``
    and the line for a file that is not UTF-8 text, holds a NUL byte, or has a row whose
    number of fields is not the header's."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError("table", f"cannot read {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            "table", f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x})"
        ) from None
    if "\0" in text:
        line = text[: text.index("\0")].count("\n") + 1
        raise ConfigError("table", f"{path}:{line}: a NUL byte; a table is CSV text")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if not header:
            raise ConfigError("table", f"{path} has no rows")
        rows, lines = [], []
        for fields_ in reader:
            if not fields_:
                continue
            if len(fields_) != len(header):
                raise ConfigError(
                    "table", f"{path}:{reader.line_num}: {len(fields_)} fields, the header "
                    f"has {len(header)}"
                )  # fmt: skip
            rows.append(dict(zip(header, fields_)))
            lines.append(reader.line_num)
    except csv.Error as exc:
        raise ConfigError("table", f"{path}:{reader.line_num}: {exc}") from None
    if len(set(header)) != len(header):
        raise ConfigError("table", f"{path}:1: a column is named twice")
    if not rows:
        raise ConfigError("table", f"{path} has no rows")
    return rows, lines


def _number(text: str, path: Path, line: int, column: str) -> float:
    """A cell as a number (an empty cell is NaN: absent); ConfigError naming the line."""
    if text == "":
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise ConfigError(
            "table", f"{path}:{line}: {column} is not a number: {show(text, 40)}"
        ) from None


# -- the orders a grid and a random search run ----------------------------------------------
def grid_order(table: Table, seed: int) -> list[Config]:
    """The whole grid, in a random order (``random.Random(seed)``)."""
    order = list(table.configs)
    _random.Random(seed).shuffle(order)
    return order


def _values(configs: Sequence[Config], param: str) -> list[str]:
    return sorted({c.params[param] for c in configs})


def random_draws(table: Table, seed: int, tries: int = 200) -> list[Config]:
    """A random search over the table's space, drawn up front as the ``random`` searcher's
    trials are: each setting uniform over the values the table has for the settings drawn
    before it (a regularizer's own settings among that regularizer's values, as in a
    conditional space); a configuration already drawn is drawn again, up to ``tries`` times."""
    rng, seen, out = _random.Random(seed), set(), []
    while True:
        for _ in range(tries):
            left: Sequence[Config] = table.configs
            for p in table.params:
                value = rng.choice(_values(left, p))
                left = [c for c in left if c.params[p] == value]
            if left[0].key not in seen:
                seen.add(left[0].key)
                out.append(left[0])
                break
        else:
            return out


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


def told_finals(table: Table, names: Sequence[str]) -> Table:
    """``table`` where each of ``names`` (final metrics) holds, at every epoch of each seed, that
    seed's final value: a scheduler stopping on them is told each outcome at its first rung."""
    configs = tuple(
        dataclasses.replace(
            c,
            metrics={
                s: {**m, **{n: np.full(table.epochs, m[n][-1]) for n in names}}
                for s, m in c.metrics.items()
            },
        )
        for c in table.configs
    )
    per_epoch = table.per_epoch + tuple(n for n in names if n not in table.per_epoch)
    return dataclasses.replace(table, configs=configs, per_epoch=per_epoch)


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


def first_seeds(table: Table, n: int) -> Table:
    """``table`` with the first ``n`` seeds of every configuration: what the same sweep would
    have seen with ``n`` seeds. ConfigError naming ``--seeds`` unless 1 <= n <= the fewest
    seeds a configuration has."""
    most = min(len(c.seeds) for c in table.configs)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= most:
        raise ConfigError(
            "seeds", f"must be an integer from 1 to {most} (the table's seeds per "
            f"configuration), got {show(n)}"
        )  # fmt: skip
    configs = tuple(
        dataclasses.replace(
            c,
            seeds=c.seeds[:n],
            seconds={s: c.seconds[s] for s in c.seeds[:n]},
            metrics={s: c.metrics[s] for s in c.seeds[:n]},
        )
        for c in table.configs
    )
    return dataclasses.replace(table, configs=configs)


# -- the registered members on a table -------------------------------------------------------
def table_space(table: Table) -> Any:
    """The table's settings as a ``search.space`` (:class:`lipsweep.search.space.SearchSpace`):
    each setting a choice of the values the table has; with a ``regularizer`` setting, the
    others are that regularizer's branch (drawn among its values once it is drawn)."""
    from lipsweep.search.space import Distribution, SearchSpace

    def choice(configs: Sequence[Config], p: str) -> Any:
        return Distribution("choice", tuple(_values(configs, p)))

    if "regularizer" not in table.params:
        return SearchSpace({p: choice(table.configs, p) for p in table.params}, {})
    rest = [p for p in table.params if p != "regularizer"]
    branches = {}
    for reg in _values(table.configs, "regularizer"):
        under = [c for c in table.configs if c.params["regularizer"] == reg]
        branches[reg] = {p: choice(under, p) for p in rest}
    return SearchSpace({"regularizer": choice(table.configs, "regularizer")}, branches)


class TableMember:
    """A searcher member restricted to the table: a draw the table lacks is told as failed
    and drawn again; a configuration already run is told its result again (no compute), one
    running is told when it ends. None after ``limit`` draws without a new configuration,
    or once every configuration has run or is running."""

    def __init__(self, member: Any, table: Table, limit: Optional[int] = None) -> None:
        self.member, self.table = member, table
        self.by_params = {tuple(c.params[p] for p in table.params): c for c in table.configs}
        self.limit = limit or 20 * len(table.configs)
        self.done: dict[str, tuple[Optional[Mapping[str, float]], bool]] = {}
        self.pending: dict[str, list[str]] = {}
        self.key_of: dict[str, tuple[str, str]] = {}  # trial -> (config key, member's id)

    def suggest(self, trial_id: str) -> Optional[dict[str, Any]]:
        for k in range(self.limit):
            if len(self.done) + len(self.pending) == len(self.by_params):
                return None
            sub = trial_id if k == 0 else f"{trial_id}~{k}"
            flat = self.member.suggest(sub)
            if flat is None:
                return None
            config = self.by_params.get(tuple(str(flat.get(p, "")) for p in self.table.params))
            if config is None:
                self.member.report(sub, None, failed=True)
            elif config.key in self.done:
                self.member.report(sub, *self.done[config.key])
            elif config.key in self.pending:
                self.pending[config.key].append(sub)
            else:
                self.pending[config.key] = []
                self.key_of[trial_id] = (config.key, sub)
                return dict(config.params)
        return None

    def report(
        self, trial_id: str, result: Optional[Mapping[str, Any]], failed: bool = False
    ) -> None:
        key, sub = self.key_of.pop(trial_id)
        self.done[key] = (result, failed)
        self.member.report(sub, result, failed)
        for sub in self.pending.pop(key, []):
            self.member.report(sub, result, failed)


class NoStop:
    """No scheduler: every trial runs its full budget."""

    def group(self, trial_id: str, flat: Mapping[str, Any]) -> str:
        return trial_id

    def decide(self, trial_id: str, group: str, t: float, metrics: Mapping[str, Any]) -> str:
        return CONTINUE

    def report(self, trial_id: str, result: Optional[Mapping[str, Any]] = None) -> None:
        pass


class CoreRule(NoStop):
    """A scheduler member's core, driven as the Tune adapter drives it (its grouping
    included): ``adapter`` is what the registered scheduler's ``create`` built (a
    :class:`~lipsweep.search.schedulers.cores.Decider`, or a plugin's scheduler carrying
    ``core`` and ``group``)."""

    def __init__(self, adapter: Any) -> None:
        self.adapter, self.core = adapter, adapter.core

    def group(self, trial_id: str, flat: Mapping[str, Any]) -> str:
        return self.adapter.group(trial_id, flat)

    def decide(self, trial_id: str, group: str, t: float, metrics: Mapping[str, Any]) -> str:
        return self.core.decide(trial_id, group, t, metrics)

    def report(self, trial_id: str, result: Optional[Mapping[str, Any]] = None) -> None:
        self.core.report(trial_id)


SYNE_MOASHA = "syne-moasha"
"""The peer method that exists only where Syne Tune imports (:func:`syne_tune_missing`)."""
SYNE_INSTALL = (
    "the bench extra (syne-tune==0.16.0): `uv sync --frozen --extra dev --extra bench` in a "
    "clone, `pip install '.[bench]'` elsewhere"
)


@functools.cache
def syne_tune_missing() -> Optional[str]:
    """Why Syne Tune's MO-ASHA cannot be imported here (the import error), or None."""
    try:
        import syne_tune.optimizer.schedulers.multiobjective.moasha  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


class SyneMoashaRule(NoStop):
    """Syne Tune's MO-ASHA (``syne_tune.optimizer.schedulers.multiobjective.moasha.MOASHA``,
    Schmucker et al. 2021, arXiv 2106.12639) deciding, as Syne Tune 0.16's ``Tuner`` drives a
    scheduler (``syne_tune/tuner.py``): ``on_trial_add`` when a trial starts,
    ``on_trial_result`` at each epoch, ``on_trial_remove`` once it says STOP (it says STOP at
    ``max_t`` too). Its defaults otherwise: one bracket, non-dominated sorting with its
    epsilon-net tie-break. Per trial, as Syne Tune judges trials (not seed-aware). It
    minimises every metric, so ``max`` metrics are negated. A peer from outside lipsweep,
    not a registered member."""

    TIME = "epoch"
    CREATED = datetime.datetime(2000, 1, 1)  # a Trial needs one; no decision reads it

    def __init__(
        self,
        metrics: Sequence[str],
        modes: Sequence[str],
        max_t: int,
        grace_period: int,
        reduction_factor: float,
        seed: int,
    ) -> None:
        from syne_tune.backend.trial_status import Trial
        from syne_tune.optimizer.scheduler import SchedulerDecision
        from syne_tune.optimizer.schedulers.multiobjective.moasha import MOASHA

        self.core = MOASHA(
            config_space={}, metrics=list(metrics), do_minimize=True, time_attr=self.TIME,
            max_t=max_t, grace_period=grace_period, reduction_factor=reduction_factor,
            random_seed=seed,
        )  # fmt: skip
        self.signs = {m: 1.0 if mode == "min" else -1.0 for m, mode in zip(metrics, modes)}
        self.make_trial, self.go = Trial, SchedulerDecision.CONTINUE
        self.trials: dict[str, Any] = {}  # our trial -> Syne Tune's Trial
        self.removed: set[str] = set()

    def decide(self, trial_id: str, group: str, t: float, metrics: Mapping[str, Any]) -> str:
        if t == 0:  # the trial starts
            self.trials[trial_id] = self.make_trial(len(self.trials), {}, self.CREATED)
            self.core.on_trial_add(self.trials[trial_id])
            return CONTINUE
        result = {self.TIME: t} | {m: s * metrics[m] for m, s in self.signs.items()}
        go = self.core.on_trial_result(self.trials[trial_id], result) == self.go
        if not go:
            self.core.on_trial_remove(self.trials[trial_id])
            self.removed.add(trial_id)
        return CONTINUE if go else STOP

    def report(self, trial_id: str, result: Optional[Mapping[str, Any]] = None) -> None:
        if trial_id in self.trials and trial_id not in self.removed:
            self.core.on_trial_remove(self.trials[trial_id])
            self.removed.add(trial_id)


# -- the simulation --------------------------------------------------------------------------
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


# -- methods and the benchmark ----------------------------------------------------------------
def check_objectives(table: Table, objectives: Sequence[tuple[str, str]]) -> None:
    """ConfigError naming ``--objective`` if an objective is not a final column of ``table``."""
    for name, _ in objectives:
        if name not in table.final:
            raise ConfigError(
                "objective", f"{name!r} is not a final column of the table; "
                f"final columns are {list(table.final)}"
            )  # fmt: skip


def stop_metrics(
    table: Table, objectives: Sequence[tuple[str, str]], stop_on: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """What ``moasha`` stops on: ``stop_on``, else each objective's per-epoch counterpart
    (the column itself when per-epoch, else ``probe_<name>``); ConfigError if absent."""
    chosen = list(stop_on) or [
        (n if n in table.per_epoch else probe_metric(n), d) for n, d in objectives
    ]
    for name, _ in chosen:
        if name not in table.per_epoch:
            raise ConfigError(
                "stop_on" if stop_on else "objective",
                f"{name!r} is not a per-epoch column of the table; per-epoch columns are "
                f"{list(table.per_epoch)}",
            )
    return chosen


ALIASES: dict[str, tuple[str, Optional[str], dict[str, Any]]] = {
    "asha-clean": ("grid", "asha", {"metric": ACC_CLEAN, "mode": "max"}),
    "moasha": ("grid", "moasha", {}),
    "optuna-moasha": ("optuna-tpe", "moasha", {}),
}
"""Short names of searcher + scheduler pairs: ``asha-clean`` is the grid order with ``asha``
on clean accuracy (the option a sweep had before ``moasha``), ``moasha`` the grid order with
``moasha``, ``optuna-moasha`` TPE proposing and ``moasha`` stopping."""
DEFAULT_METHODS = (
    "grid", "random", "optuna-tpe", "optuna-nsga2", "asha-clean", "moasha", "optuna-moasha",
)  # fmt: skip
"""What ``bench-search`` replays without ``--method`` (and ``syne-moasha`` where Syne Tune
imports). Any registered searcher ``NAME`` or ``SEARCHER+SCHEDULER`` pair, plugins included,
can be named instead."""
NSGA_POPULATION = 8
"""``population_size`` the replay gives a searcher that reads it (NSGA-II/III): the tables
hold tens of configurations, and Optuna's default (50) would leave it random throughout."""


@dataclass(frozen=True)
class Method:
    """A replayed method: a registered searcher, and a registered scheduler or none."""

    name: str
    searcher: str
    scheduler: Optional[str] = None
    overrides: Mapping[str, Any] = field(default_factory=dict)


def parse_method(name: str) -> Method:
    """``--method`` -> :class:`Method` (an alias, ``syne-moasha``, a searcher, or
    ``SEARCHER+SCHEDULER``); ConfigError naming ``--method`` for an unknown member."""
    from lipsweep.search.schedulers import list_schedulers
    from lipsweep.search.searchers import list_searchers

    if name in ALIASES:
        searcher, scheduler, overrides = ALIASES[name]
        return Method(name, searcher, scheduler, overrides)
    if name == SYNE_MOASHA:
        return Method(name, "grid", SYNE_MOASHA)
    searcher, _, scheduler = name.partition("+")
    if searcher not in list_searchers():
        raise ConfigError(
            "method", f"unknown searcher {searcher!r} in {name!r}; give a searcher "
            f"{list_searchers()}, SEARCHER+SCHEDULER (schedulers {list_schedulers()}), or one "
            f"of {[*ALIASES, SYNE_MOASHA]}"
        )  # fmt: skip
    if scheduler and scheduler not in list_schedulers():
        raise ConfigError(
            "method", f"unknown scheduler {scheduler!r} in {name!r}; schedulers are "
            f"{list_schedulers()}"
        )  # fmt: skip
    return Method(name, searcher, scheduler or None)


@dataclass(frozen=True)
class Bench:
    """Everything a replay needs besides its seed (checked once, before the first replay)."""

    table: Table
    objectives: tuple[tuple[str, str], ...]
    stops: tuple[tuple[str, str], ...]
    seeds: tuple[str, ...]
    grace_period: int = 1
    reduction_factor: float = 2
    confidence: float = 0.8
    workers: int = 4

    def search(self, method: Method, seed: int, table: Optional[Table] = None) -> Any:
        """The registered searcher of ``method`` on the table, each configuration once per
        seed (:class:`Repeats` over a :class:`TableMember`)."""
        from lipsweep.search.protocol import ListMember, Repeats, TuneSearcherMember
        from lipsweep.search.searchers import (
            SearchRequest,
            create_searcher,
            searcher_info,
            searcher_settings,
            settings_keys,
        )

        table = table or self.table
        names = [n for n, _ in self.objectives]
        values = {
            "num_samples": len(table.configs), "seed": seed, "metric": names,
            "mode": [d for _, d in self.objectives], "population_size": NSGA_POPULATION,
        }  # fmt: skip
        keys = settings_keys(method.searcher)
        settings = searcher_settings(
            method.searcher, {k: v for k, v in values.items() if k in keys}
        )
        if method.searcher == "grid":
            drawn = grid_order(table, seed)
        elif searcher_info(method.searcher).lazy:
            drawn = []
        else:  # drawn when a space is loaded: here, from the table's values
            drawn = random_draws(table, seed)
        request = SearchRequest(
            space=table_space(table), trials=[dict(c.params) for c in drawn], normalise=False
        )
        plan = create_searcher(method.searcher, settings, request)
        if plan.search_alg is not None:
            member: Any = TuneSearcherMember(plan.search_alg)
        else:
            try:
                member = ListMember(plan.param_space["trial"]["grid_search"])
            except (KeyError, TypeError):
                raise ConfigError(
                    "method", f"searcher {method.searcher!r} gives neither a Tune Searcher "
                    "nor a list of trials: the replay cannot drive it"
                ) from None  # fmt: skip
        return Repeats(TableMember(member, table), self.seeds, names)

    def rule(self, method: Method, seed: int, table: Optional[Table] = None) -> Any:
        """The registered scheduler of ``method`` (its core, as the Tune adapter drives it;
        no Ray imported for a built-in)."""
        import dataclasses as dc

        from lipsweep.search.schedulers import (
            SCHEDULERS,
            SchedulerContext,
            create_scheduler,
            scheduler_settings,
        )

        table = table or self.table
        stops = self.stops
        if method.scheduler is None:
            return NoStop()
        if method.scheduler == SYNE_MOASHA:
            return SyneMoashaRule(
                [n for n, _ in stops], [d for _, d in stops], table.epochs, self.grace_period,
                self.reduction_factor, seed,
            )  # fmt: skip
        fields_ = {f.name for f in dc.fields(SCHEDULERS.entry(method.scheduler).settings)}
        values = {
            "metrics": [n for n, _ in stops], "modes": [d for _, d in stops],
            "metric": stops[0][0], "mode": stops[0][1], "grace_period": self.grace_period,
            "reduction_factor": self.reduction_factor, "confidence": self.confidence,
            **method.overrides,
        }  # fmt: skip
        settings = scheduler_settings(
            {"type": method.scheduler, **{k: v for k, v in values.items() if k in fields_}}
        )
        trials = [{**c.params, "seed": s} for c in table.configs for s in c.seeds]
        adapter = create_scheduler(
            settings, SchedulerContext(epochs=table.epochs, trials=trials, seeds=len(self.seeds))
        )
        if not hasattr(getattr(adapter, "core", None), "decide"):
            raise ConfigError(
                "method", f"scheduler {method.scheduler!r} has no decision core (a Ray "
                "TrialScheduler only): the replay cannot drive it"
            )  # fmt: skip
        return CoreRule(adapter)

    def replay(self, method: Method, seed: int) -> Replay:
        """One replay of ``method`` with seed ``seed``."""
        return simulate(
            self.table, self.search(method, seed), self.rule(method, seed), self.objectives,
            self.workers,
        )  # fmt: skip


REFERENCES = ("informed-order", "moasha-told-finals")
"""What the table allows, beside the methods (they know the final values, so they are not
methods): ``informed-order`` (:func:`informed_order`, no stopping, one replay: it is
deterministic) and ``moasha-told-finals`` (``moasha`` in ``moasha``'s grid orders, stopping on
the objectives' final values at every rung, :func:`told_finals`). Read them against
``moasha``: far below ``moasha-told-finals``, it is limited by the per-epoch signal; close to
it, by the table's horizon and order; ``informed-order`` says whether the target is reachable
at all."""


def references(bench: Bench, replays: int, workers: int) -> dict[str, list[Replay]]:
    """The :data:`REFERENCES`' trajectories on the bench's table."""
    from lipsweep.search.protocol import ListMember, Repeats

    table, objectives = bench.table, bench.objectives
    names = [n for n, _ in objectives]
    told = told_finals(table, names)
    told_bench = dataclasses.replace(bench, table=told, stops=objectives)
    grid_moasha = parse_method("moasha")
    order = ListMember([dict(c.params) for c in informed_order(table, objectives)])
    informed = Repeats(TableMember(order, table), bench.seeds, names)
    return {
        "informed-order": [simulate(table, informed, NoStop(), objectives, workers)],
        "moasha-told-finals": [
            simulate(
                told,
                told_bench.search(grid_moasha, seed),
                told_bench.rule(grid_moasha, seed),
                objectives,
                workers,
            )  # fmt: skip
            for seed in range(replays)
        ],
    }


def _median(values: Sequence[Optional[float]]) -> Optional[float]:
    """The median, None counting as never (above every number); None if most are None."""
    xs = sorted(values, key=lambda v: math.inf if v is None else v)
    mid = xs[(len(xs) - 1) // 2 : len(xs) // 2 + 1]
    if any(v is None for v in mid):
        return None
    return float(np.mean(mid))


def _quiet_optuna() -> None:
    try:
        import optuna
    except ImportError:  # pragma: no cover - optuna is a dependency
        return
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def make_bench(
    table: Table,
    objectives: Sequence[tuple[str, str]],
    stop_on: Sequence[tuple[str, str]] = (),
    workers: int = 4,
    grace_period: int = 1,
    reduction_factor: float = 2,
    confidence: float = 0.8,
) -> Bench:
    """The :class:`Bench` of ``table`` (every configuration must have the same seeds)."""
    seeds = table.configs[0].seeds
    odd = next((c for c in table.configs if sorted(c.seeds) != sorted(seeds)), None)
    if odd is not None:
        raise ConfigError(
            "table", f"{odd.key} has seeds {list(odd.seeds)}, the first configuration "
            f"{list(seeds)}: every configuration must have the same seeds"
        )  # fmt: skip
    stops = tuple(stop_metrics(table, objectives, stop_on))
    return Bench(
        table, tuple(objectives), stops, tuple(seeds), grace_period, reduction_factor,
        confidence, workers,
    )  # fmt: skip


def bench_search(
    table: Table,
    objectives: Sequence[tuple[str, str]],
    budget: float,
    replays: int,
    workers: int,
    stop_on: Sequence[tuple[str, str]] = (),
    only: Sequence[str] = (),
    grace_period: int = 1,
    reduction_factor: float = 2,
    confidence: float = 0.8,
    seeds: Optional[int] = None,
) -> tuple[dict[str, Any], dict[str, list[Replay]]]:
    """Replay every method ``replays`` times, and the :data:`REFERENCES`; the summary dict
    and the trajectories (the references' too, by their names). ``seeds``: replay with the
    first ``seeds`` seeds of every configuration (:func:`first_seeds`). Everything is checked
    against the table before the first replay."""
    if seeds is not None:
        table = first_seeds(table, seeds)
    check_objectives(table, objectives)
    _quiet_optuna()  # a study per replay: no banner each
    if grace_period > table.epochs:
        raise ConfigError(
            "grace_period", f"must be at most the table's {table.epochs} epochs, "
            f"got {grace_period}"
        )  # fmt: skip
    if not 0 < confidence < 1:
        raise ConfigError("confidence", f"must be in (0, 1), got {confidence}")
    bench = make_bench(
        table, objectives, stop_on, workers, grace_period, reduction_factor, confidence
    )
    stops = bench.stops
    chosen = [parse_method(m) for m in (only or DEFAULT_METHODS)]
    if not only and syne_tune_missing() is None:
        chosen.append(parse_method(SYNE_MOASHA))
    if any(m.scheduler == SYNE_MOASHA for m in chosen) and syne_tune_missing() is not None:
        raise ConfigError(
            "method", f"{SYNE_MOASHA} needs Syne Tune, which does not import here "
            f"({syne_tune_missing()}); install it with {SYNE_INSTALL}"
        )  # fmt: skip
    for method in chosen:  # every member builds (its settings checked) before any replay
        bench.search(method, 0)
        bench.rule(method, 0)
    runs: dict[str, list[Replay]] = {}
    for method in chosen:
        runs[method.name] = [bench.replay(method, seed) for seed in range(replays)]
        _log.info(
            "%s: median hypervolume %.3f at %.0f%% of the compute",
            method.name,
            float(np.median([r.hv_at(budget) for r in runs[method.name]])),
            100 * budget,
        )
    refs = references(bench, replays, workers)
    summary = {
        "objectives": [f"{n}:{d}" for n, d in objectives],
        "stop_on": [f"{n}:{d}" for n, d in stops],
        "budget": budget,
        "replays": replays,
        "workers": workers,
        "grace_period": grace_period,
        "reduction_factor": reduction_factor,
        "confidence": confidence,
        "seeds": len(bench.seeds),
        "grid": {"configurations": len(table.configs), "compute_s": table.compute},
        "oracle_compute_fraction": oracle_stopping(table, objectives, grace_period)[
            "seeds together"
        ][1],
        "methods": {name: _scores(rs, budget) for name, rs in runs.items()},
        "references": {name: _scores(rs, budget) for name, rs in refs.items()},
    }
    return summary, runs | refs


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


def iter_rows(table: Table) -> Iterator[dict[str, Any]]:
    """The table's rows again, as :func:`load_table` reads them (for writing a table)."""
    for c in table.configs:
        for s in c.seeds:
            for e in range(table.epochs):
                row = {CONFIG: c.key}
                row |= {PARAM_PREFIX + p: v for p, v in c.params.items() if p != CONFIG}
                row |= {SEED: s, EPOCH: e + 1, SECONDS: float(c.seconds[s][e])}
                row |= {n: float(a[e]) for n, a in c.metrics[s].items()}
                yield row
