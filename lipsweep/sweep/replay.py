"""``lipsweep bench-search``: replay search methods on a recorded table (issue 28 item 5).

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
seeds ``0..replays-1``; the same table, seed and flags give the same summary.

Methods (:data:`METHODS`): ``grid`` (the grid in a random order), ``random`` (each setting
drawn independently from the values the table has), ``optuna-tpe`` / ``optuna-nsga2``
(multi-objective Optuna, no pruning), ``asha-clean`` (the grid order with ASHA on clean
accuracy, today's best option), ``moasha`` (the grid order with multi-objective ASHA on the
per-epoch counterparts of the objectives, seed-aware) and ``optuna-moasha`` (TPE proposing,
``moasha`` stopping). The schedulers are the live sweep's own decision code
(:class:`lipsweep.sweep.schedulers.moasha.MoAsha`), on rungs set by ``grace_period`` and
``reduction_factor``. Where Syne Tune imports (the benchmark-only ``bench`` extra),
``syne-moasha`` is its peer: the grid order with Syne Tune's own MO-ASHA deciding
(:class:`SyneMoashaRule`).

Beside the methods, two references that know the final values (:data:`REFERENCES`) say what
the table allows: ``informed-order`` (:class:`InformedOrder`) and ``moasha-told-finals``
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
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np

from lipsweep.core.config_base import ConfigError, show
from lipsweep.core.hypervolume import hypervolume, reference_point, relative_hypervolume
from lipsweep.core.metric_names import ACC_CLEAN, probe_metric

_log = logging.getLogger(__name__)

CONFIG = "config"
"""The column holding a configuration's key (any string; one configuration, one key)."""
PARAM_PREFIX = "param:"
"""Optional columns ``param:<setting>`` hold a configuration's settings (the searchers draw
from their values); without them a configuration's one setting is its ``config`` key."""
SEED, EPOCH, SECONDS = "seed", "epoch", "epoch_seconds"
TARGET = 0.9
"""``compute_fraction_to_90``: the compute at which a replay first reaches this fraction."""


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
            raise ConfigError("--table", f"{path} has no {need!r} column")
    if not params and CONFIG not in cols:
        raise ConfigError(
            "--table", f"{path} has neither a {CONFIG!r} nor a {PARAM_PREFIX}<setting> column"
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
            raise ConfigError("--table", f"{path}:{line}: epoch {show(row[EPOCH])}") from None
        seconds = _number(row[SECONDS], path, line, SECONDS)
        if not (math.isfinite(seconds) and seconds > 0):
            raise ConfigError(
                "--table", f"{path}:{line}: {SECONDS} must be a positive number of seconds, "
                f"got {show(row[SECONDS])}"
            )  # fmt: skip
        for name in names:
            _number(row[name], path, line, name)
        here = (key, row[SEED], epoch)
        if here in first_line:
            raise ConfigError(
                "--table", f"{path}:{line}: a second row for {key} seed {row[SEED]} epoch "
                f"{epoch} (the first is line {first_line[here]})"
            )  # fmt: skip
        first_line[here] = line
        trials.setdefault((key, row[SEED]), {})[epoch] = row
    lengths = {len(e) for e in trials.values()}
    epochs = max(lengths)
    for (key, seed), by_epoch in trials.items():
        if sorted(by_epoch) != list(range(1, epochs + 1)):
            raise ConfigError(
                "--table", f"{path}: {key} seed {seed} has epochs {sorted(by_epoch)[:5]}..., "
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
        raise ConfigError("--table", f"cannot read {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            "--table", f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x})"
        ) from None
    if "\0" in text:
        line = text[: text.index("\0")].count("\n") + 1
        raise ConfigError("--table", f"{path}:{line}: a NUL byte; a table is CSV text")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if not header:
            raise ConfigError("--table", f"{path} has no rows")
        rows, lines = [], []
        for fields_ in reader:
            if not fields_:
                continue
            if len(fields_) != len(header):
                raise ConfigError(
                    "--table", f"{path}:{reader.line_num}: {len(fields_)} fields, the header "
                    f"has {len(header)}"
                )  # fmt: skip
            rows.append(dict(zip(header, fields_)))
            lines.append(reader.line_num)
    except csv.Error as exc:
        raise ConfigError("--table", f"{path}:{reader.line_num}: {exc}") from None
    if len(set(header)) != len(header):
        raise ConfigError("--table", f"{path}:1: a column is named twice")
    if not rows:
        raise ConfigError("--table", f"{path} has no rows")
    return rows, lines


def _number(text: str, path: Path, line: int, column: str) -> float:
    """A cell as a number (an empty cell is NaN: absent); ConfigError naming the line."""
    if text == "":
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise ConfigError(
            "--table", f"{path}:{line}: {column} is not a number: {show(text, 40)}"
        ) from None


# -- proposing configurations ----------------------------------------------------------------
class Proposer:
    """Which configuration to run next; told each configuration's outcome."""

    def next(self) -> Optional[Config]:
        raise NotImplementedError

    def tell(self, config: Config, values: Optional[np.ndarray]) -> None:
        """``values``: the seed-mean objectives, or None when the configuration was stopped."""


class GridOrder(Proposer):
    """The whole grid, in a random order."""

    def __init__(self, table: Table, seed: int) -> None:
        self.order = list(table.configs)
        _random.Random(seed).shuffle(self.order)

    def next(self) -> Optional[Config]:
        return self.order.pop(0) if self.order else None


def _values(configs: Sequence[Config], param: str) -> list[str]:
    return sorted({c.params[param] for c in configs})


class RandomDraws(Proposer):
    """A random searcher over the table's space: each setting drawn uniformly from the values
    the table has for the settings drawn before it (a regularizer's own settings are drawn
    among that regularizer's values once it is drawn, as in a conditional space); a
    configuration already run is drawn again, up to ``tries`` times."""

    def __init__(self, table: Table, seed: int, tries: int = 200) -> None:
        self.rng = _random.Random(seed)
        self.table, self.tries, self.seen = table, tries, set()

    def next(self) -> Optional[Config]:
        for _ in range(self.tries):
            left: Sequence[Config] = self.table.configs
            for p in self.table.params:
                value = self.rng.choice(_values(left, p))
                left = [c for c in left if c.params[p] == value]
            if left[0].key not in self.seen:
                self.seen.add(left[0].key)
                return left[0]
        return None


class OptunaProposer(Proposer):
    """A multi-objective Optuna study over the table's settings, told each configuration's
    seed-mean objectives (a stopped one as pruned). The space is conditional on the first
    setting (``regularizer``): each other setting is a categorical of the values the table
    has under that first value, named ``<setting>|<first>=<value>``. A draw the table lacks
    is told as failed; a configuration already run is told its values again (no compute)."""

    def __init__(self, table: Table, seed: int, sampler: str, directions: Sequence[str]) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        samplers = {
            "tpe": lambda: optuna.samplers.TPESampler(seed=seed),
            "nsga2": lambda: optuna.samplers.NSGAIISampler(seed=seed, population_size=8),
        }
        self.optuna = optuna
        self.study = optuna.create_study(
            directions=[d + "imize" for d in directions], sampler=samplers[sampler]()
        )
        self.table = table
        self.by_params = {tuple(c.params[p] for p in table.params): c for c in table.configs}
        self.told: dict[str, Optional[np.ndarray]] = {}
        self.pending: dict[str, list[Any]] = {}
        self.limit = 20 * len(table.configs)

    def _draw(self, trial: Any) -> Optional[Config]:
        first, *rest = self.table.params
        head = trial.suggest_categorical(first, _values(self.table.configs, first))
        under = [c for c in self.table.configs if c.params[first] == head]
        draw = [head] + [
            trial.suggest_categorical(f"{p}|{first}={head}", _values(under, p)) for p in rest
        ]
        return self.by_params.get(tuple(draw))

    def next(self) -> Optional[Config]:
        State = self.optuna.trial.TrialState
        for _ in range(self.limit):
            if len(self.told) + len(self.pending) == len(self.by_params):
                return None  # every configuration has run or is running
            trial = self.study.ask()
            config = self._draw(trial)
            if config is None:
                self.study.tell(trial, state=State.FAIL)
            elif config.key in self.told:
                values = self.told[config.key]
                if values is None:
                    self.study.tell(trial, state=State.PRUNED)
                else:
                    self.study.tell(trial, list(map(float, values)))
            elif config.key in self.pending:
                self.pending[config.key].append(trial)  # running: told when it ends
            else:
                self.pending[config.key] = [trial]
                return config
        return None

    def tell(self, config: Config, values: Optional[np.ndarray]) -> None:
        State = self.optuna.trial.TrialState
        self.told[config.key] = values
        for trial in self.pending.pop(config.key, []):
            if values is None:
                self.study.tell(trial, state=State.PRUNED)
            else:
                self.study.tell(trial, list(map(float, values)))


class InformedOrder(Proposer):
    """A searcher that knows every configuration's final objectives (a reference, not a
    method): it proposes them greedily by the hypervolume each adds, per worker-second it
    costs, to those proposed before it, then the ones that add nothing, in the table's order.
    Run in full, it shows what the table allows within a budget to a search that needs no
    exploration; the greedy order is a schedule, not the best subset (that is a knapsack)."""

    def __init__(self, table: Table, objectives: Sequence[tuple[str, str]]) -> None:
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
        self.order = chosen + left

    def next(self) -> Optional[Config]:
        return self.order.pop(0) if self.order else None


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


# -- stopping trials -------------------------------------------------------------------------
class StopRule:
    """Whether a trial goes on after an epoch; the live sweep's scheduler core or nothing."""

    def on_result(self, trial: str, group: str, t: int, metrics: Mapping[str, float]) -> bool:
        return True

    def on_complete(self, trial: str) -> None:
        pass


SYNE_MOASHA = "syne-moasha"
"""The method that exists only where Syne Tune imports (:func:`syne_tune_missing`)."""
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


class SyneMoashaRule(StopRule):
    """Syne Tune's MO-ASHA (``syne_tune.optimizer.schedulers.multiobjective.moasha.MOASHA``,
    Schmucker et al. 2021, arXiv 2106.12639) deciding, as Syne Tune 0.16's ``Tuner`` drives a
    scheduler (``syne_tune/tuner.py``): ``on_trial_add`` when a trial starts,
    ``on_trial_result`` at each epoch, ``on_trial_remove`` once it says STOP (it says STOP at
    ``max_t`` too). Its defaults otherwise: one bracket, non-dominated sorting with its
    epsilon-net tie-break. Per trial, as Syne Tune judges trials (not seed-aware). It
    minimises every metric, so ``max`` metrics are negated."""

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

    def on_result(self, trial: str, group: str, t: int, metrics: Mapping[str, float]) -> bool:
        if t == 0:  # the trial starts
            self.trials[trial] = self.make_trial(len(self.trials), {}, self.CREATED)
            self.core.on_trial_add(self.trials[trial])
            return True
        result = {self.TIME: t} | {m: s * metrics[m] for m, s in self.signs.items()}
        go = self.core.on_trial_result(self.trials[trial], result) == self.go
        if not go:
            self.core.on_trial_remove(self.trials[trial])
            self.removed.add(trial)
        return go

    def on_complete(self, trial: str) -> None:
        if trial in self.trials and trial not in self.removed:
            self.core.on_trial_remove(self.trials[trial])
            self.removed.add(trial)


class SchedulerRule(StopRule):
    """:class:`~lipsweep.sweep.schedulers.moasha.MoAsha` on ``metrics``; seed-aware when
    ``groups`` (a configuration's seeds are judged and stopped together), else per trial
    (ASHA's behaviour)."""

    def __init__(
        self,
        metrics: Sequence[str],
        modes: Sequence[str],
        max_t: int,
        grace_period: int,
        reduction_factor: float,
        expected: Optional[Mapping[str, int]],
    ) -> None:
        from lipsweep.sweep.schedulers.moasha import CONTINUE, MoAsha

        self.core = MoAsha(metrics, modes, grace_period, reduction_factor, max_t, expected)
        self.grouped = expected is not None
        self.go = CONTINUE

    def on_result(self, trial: str, group: str, t: int, metrics: Mapping[str, float]) -> bool:
        return self.core.on_result(trial, group if self.grouped else trial, t, metrics) == self.go

    def on_complete(self, trial: str) -> None:
        self.core.on_complete(trial)


# -- the simulation --------------------------------------------------------------------------
@dataclass
class Replay:
    """One replay's trajectory: after each configuration that ran its full budget, the
    compute spent so far (fraction of the grid's) and the relative hypervolume reached."""

    compute: list[float] = field(default_factory=list)
    hv: list[float] = field(default_factory=list)
    stopped: int = 0

    def hv_at(self, budget: float) -> float:
        """The hypervolume fraction reached within ``budget`` of the grid's compute."""
        got = [h for c, h in zip(self.compute, self.hv) if c <= budget + 1e-12]
        return max(got, default=0.0)

    def compute_to(self, target: float) -> Optional[float]:
        """The compute fraction at which the hypervolume first reached ``target``, or None."""
        return next((c for c, h in zip(self.compute, self.hv) if h >= target - 1e-12), None)


def simulate(
    table: Table,
    proposer: Proposer,
    rule: StopRule,
    objectives: Sequence[tuple[str, str]],
    workers: int,
) -> Replay:
    """Run ``proposer`` + ``rule`` on ``workers`` simulated workers until nothing is left.

    Events are epoch ends, in time order (ties by start order). A configuration's seeds are
    queued together when it is proposed; a seed of a configuration the rule stopped is not
    started. Compute counts each epoch when it ends."""
    names = [n for n, _ in objectives]
    dirs = [d for _, d in objectives]
    grid_front = np.array([table.objectives(c, names) for c in table.configs])
    whole = table.compute
    queue: list[tuple[Config, str]] = []
    events: list[tuple[float, int, str]] = []
    running: dict[str, tuple[Config, str, int]] = {}  # trial -> (config, seed, epochs done)
    ended: dict[str, set[str]] = {}  # config key -> seeds that ended (any way)
    full: dict[str, set[str]] = {}  # config key -> seeds that ran every epoch
    done_points: list[np.ndarray] = []
    out = Replay()
    now, spent, order, free, exhausted = 0.0, 0.0, 0, workers, False

    def start(config: Config, seed: str) -> None:
        nonlocal order, free
        trial = f"{config.key}#{seed}"
        running[trial] = (config, seed, 0)
        heapq.heappush(events, (now + float(config.seconds[seed][0]), order, trial))
        order += 1
        free -= 1

    def end(config: Config, seed: str, completed: bool) -> None:
        """``seed`` of ``config`` ended (ran every epoch, was stopped, or never started); the
        configuration's outcome once all its seeds have."""
        ended.setdefault(config.key, set()).add(seed)
        if completed:
            full.setdefault(config.key, set()).add(seed)
        if len(ended[config.key]) < len(config.seeds):
            return
        if len(full.get(config.key, ())) == len(config.seeds):
            values = table.objectives(config, names)
            proposer.tell(config, values)
            done_points.append(values)
            out.compute.append(spent / whole)
            out.hv.append(relative_hypervolume(np.array(done_points), grid_front, dirs))
        else:
            proposer.tell(config, None)
            out.stopped += 1

    while True:
        while free > 0:
            if not queue and not exhausted:
                config = proposer.next()
                if config is None:
                    exhausted = True
                else:
                    queue.extend((config, s) for s in config.seeds)
            if not queue:
                break
            config, seed = queue.pop(0)
            if rule.on_result(f"{config.key}#{seed}", config.key, 0, {}):
                start(config, seed)
            else:  # its configuration was stopped before this seed started
                rule.on_complete(f"{config.key}#{seed}")
                end(config, seed, completed=False)
        if not events:
            break
        now, _, trial = heapq.heappop(events)
        config, seed, done = running.pop(trial)
        spent += float(config.seconds[seed][done])
        done += 1
        metrics = {n: float(config.metrics[seed][n][done - 1]) for n in table.per_epoch}
        go = rule.on_result(trial, config.key, done, metrics)
        if done == table.epochs or not go:
            rule.on_complete(trial)
            free += 1
            end(config, seed, completed=done == table.epochs)
            continue
        running[trial] = (config, seed, done)
        heapq.heappush(events, (now + float(config.seconds[seed][done]), order, trial))
        order += 1
    return out


# -- methods and the benchmark ----------------------------------------------------------------
def check_objectives(table: Table, objectives: Sequence[tuple[str, str]]) -> None:
    """ConfigError naming ``--objective`` if an objective is not a final column of ``table``."""
    for name, _ in objectives:
        if name not in table.final:
            raise ConfigError(
                "--objective", f"{name!r} is not a final column of the table; "
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
                "--stop-on" if stop_on else "--objective",
                f"{name!r} is not a per-epoch column of the table; per-epoch columns are "
                f"{list(table.per_epoch)}",
            )
    return chosen


Method = Callable[[int], tuple[Proposer, StopRule]]


def moasha_rule(
    table: Table, stops: Sequence[tuple[str, str]], grace_period: int, reduction_factor: float
) -> StopRule:
    """Seed-aware ``moasha`` on ``stops`` (name, mode), its rungs up to the table's epochs."""
    seeds = {c.key: len(c.seeds) for c in table.configs}
    return SchedulerRule(
        [n for n, _ in stops], [d for _, d in stops], table.epochs, grace_period,
        reduction_factor, seeds,
    )  # fmt: skip


def methods(
    table: Table,
    objectives: Sequence[tuple[str, str]],
    stop_on: Sequence[tuple[str, str]],
    grace_period: int = 1,
    reduction_factor: float = 2,
) -> dict[str, Method]:
    """Every method by name: replay seed -> (proposer, stop rule); ``syne-moasha`` only where
    Syne Tune imports. ``grace_period`` and ``reduction_factor`` set every scheduler's rungs."""
    dirs = [d for _, d in objectives]
    stops = stop_metrics(table, objectives, stop_on)

    def mo() -> StopRule:
        return moasha_rule(table, stops, grace_period, reduction_factor)

    def clean() -> StopRule:
        return SchedulerRule(
            [ACC_CLEAN], ["max"], table.epochs, grace_period, reduction_factor, None
        )

    def syne(seed: int) -> StopRule:
        return SyneMoashaRule(
            [n for n, _ in stops], [d for _, d in stops], table.epochs, grace_period,
            reduction_factor, seed,
        )  # fmt: skip

    found: dict[str, Method] = {
        "grid": lambda s: (GridOrder(table, s), StopRule()),
        "random": lambda s: (RandomDraws(table, s), StopRule()),
        "optuna-tpe": lambda s: (OptunaProposer(table, s, "tpe", dirs), StopRule()),
        "optuna-nsga2": lambda s: (OptunaProposer(table, s, "nsga2", dirs), StopRule()),
        "asha-clean": lambda s: (GridOrder(table, s), clean()),
        "moasha": lambda s: (GridOrder(table, s), mo()),
        "optuna-moasha": lambda s: (OptunaProposer(table, s, "tpe", dirs), mo()),
    }
    why = syne_tune_missing()
    if why is None:
        found[SYNE_MOASHA] = lambda s: (GridOrder(table, s), syne(s))
    else:
        _log.info(
            "%s is left out: Syne Tune does not import (%s); install it with %s",
            SYNE_MOASHA, why, SYNE_INSTALL,
        )  # fmt: skip
    return found


METHODS = (
    "grid", "random", "optuna-tpe", "optuna-nsga2", "asha-clean", "moasha", "optuna-moasha",
    SYNE_MOASHA,
)  # fmt: skip
"""Every method's name; :func:`methods` has ``syne-moasha`` only where Syne Tune imports."""

REFERENCES = ("informed-order", "moasha-told-finals")
"""What the table allows, beside the methods (they know the final values, so they are not
methods): ``informed-order`` (:class:`InformedOrder`, no stopping, one replay: it is
deterministic) and ``moasha-told-finals`` (``moasha`` in ``moasha``'s grid orders, stopping on
the objectives' final values at every rung, :func:`told_finals`). Read them against
``moasha``: far below ``moasha-told-finals``, it is limited by the per-epoch signal; close to
it, by the table's horizon and order; ``informed-order`` says whether the target is reachable
at all."""


def references(
    table: Table,
    objectives: Sequence[tuple[str, str]],
    replays: int,
    workers: int,
    grace_period: int = 1,
    reduction_factor: float = 2,
) -> dict[str, list[Replay]]:
    """The :data:`REFERENCES`' trajectories on ``table``."""
    told = told_finals(table, [n for n, _ in objectives])

    def told_replay(seed: int) -> Replay:
        rule = moasha_rule(told, objectives, grace_period, reduction_factor)
        return simulate(told, GridOrder(told, seed), rule, objectives, workers)

    return {
        "informed-order": [
            simulate(table, InformedOrder(table, objectives), StopRule(), objectives, workers)
        ],
        "moasha-told-finals": [told_replay(seed) for seed in range(replays)],
    }


def _round(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 6)


def _median(values: Sequence[Optional[float]]) -> Optional[float]:
    """The median, None counting as never (above every number); None if most are None."""
    xs = sorted(values, key=lambda v: math.inf if v is None else v)
    mid = xs[(len(xs) - 1) // 2 : len(xs) // 2 + 1]
    if any(v is None for v in mid):
        return None
    return float(np.mean(mid))


def bench_search(
    table: Table,
    objectives: Sequence[tuple[str, str]],
    budget: float,
    replays: int,
    workers: int,
    stop_on: Sequence[tuple[str, str]] = (),
    only: Sequence[str] = (),
    grace_period: int = 1,
    reduction_factor: int = 2,
) -> tuple[dict[str, Any], dict[str, list[Replay]]]:
    """Replay every method ``replays`` times, and the :data:`REFERENCES`; the summary dict
    and the trajectories (the references' too, by their names). Everything is checked
    against the table before the first replay."""
    check_objectives(table, objectives)
    if grace_period > table.epochs:
        raise ConfigError(
            "--grace-period", f"must be at most the table's {table.epochs} epochs, "
            f"got {grace_period}"
        )  # fmt: skip
    if SYNE_MOASHA in only and syne_tune_missing() is not None:
        raise ConfigError(
            "--method", f"{SYNE_MOASHA} needs Syne Tune, which does not import here "
            f"({syne_tune_missing()}); install it with {SYNE_INSTALL}"
        )  # fmt: skip
    table_methods = methods(table, objectives, stop_on, grace_period, reduction_factor)
    chosen = list(only) or list(table_methods)
    runs: dict[str, list[Replay]] = {}
    for name in chosen:
        runs[name] = []
        for seed in range(replays):
            proposer, rule = table_methods[name](seed)
            runs[name].append(simulate(table, proposer, rule, objectives, workers))
        _log.info(
            "%s: median hypervolume %.3f at %.0f%% of the compute",
            name,
            float(np.median([r.hv_at(budget) for r in runs[name]])),
            100 * budget,
        )
    refs = references(table, objectives, replays, workers, grace_period, reduction_factor)
    summary = {
        "objectives": [f"{n}:{d}" for n, d in objectives],
        "stop_on": [f"{n}:{d}" for n, d in stop_metrics(table, objectives, stop_on)],
        "budget": budget,
        "replays": replays,
        "workers": workers,
        "grace_period": grace_period,
        "reduction_factor": reduction_factor,
        "grid": {"configurations": len(table.configs), "compute_s": round(table.compute, 3)},
        "methods": {name: _scores(rs, budget) for name, rs in runs.items()},
        "references": {name: _scores(rs, budget) for name, rs in refs.items()},
    }
    return summary, runs | refs


def _scores(rs: Sequence[Replay], budget: float) -> dict[str, Any]:
    """One method's (or reference's) entry of ``summary.json``."""
    return {
        "hv_fraction_at_budget": {
            "median": _median([r.hv_at(budget) for r in rs]),
            "per_replay": [round(r.hv_at(budget), 6) for r in rs],
        },
        "compute_fraction_to_90": {
            "median": _median([r.compute_to(TARGET) for r in rs]),
            "per_replay": [_round(r.compute_to(TARGET)) for r in rs],
        },
        "stopped_configurations": {"median": _median([r.stopped for r in rs])},
    }


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
