"""The recorded table ``bench-search`` replays: one row per (configuration, seed, epoch) with
the epoch's seconds and metrics (:func:`load_table`), and the tables derived from it (fewer
seeds, final values told early)."""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from lipsweep.core.config_base import ConfigError, show
from lipsweep.core.metric_names import probe_metric

CONFIG = "config"
"""The column holding a configuration's key (any string; one configuration, one key)."""
PARAM_PREFIX = "param:"
"""Optional columns ``param:<setting>`` hold a configuration's settings (the searchers draw
from their values); without them a configuration's one setting is its ``config`` key."""
SEED, EPOCH, SECONDS = "seed", "epoch", "epoch_seconds"


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
