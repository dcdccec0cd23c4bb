"""The ``search.space`` block: its distributions, parsed once, and the draws made from them.

A ``search.space`` value is a constant (any value that is not a mapping) or one distribution,
read by one parser (:func:`parse_distribution`) for the random sampler and Optuna alike:
``choice: [a, b, ...]``, ``uniform: [low, high]``, ``loguniform: [low, high]``, ``randint:
[low, high]`` (an integer, high excluded) or ``quniform: [low, high, q]`` (``low + i * q``
up to high; q defaults to 1). Any other mapping is refused, naming its key. A key named after
a regularizer holds settings drawn only when that regularizer is (:class:`SearchSpace`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Optional

from lipsweep.core.config_base import ConfigError, finite, key_name, show
from lipsweep.regularizers import list_regularizers
from lipsweep.settings.config import check_setting_key

DISTRIBUTIONS = {"choice", "uniform", "loguniform", "randint", "quniform"}

_SCALARS = (type(None), bool, int, float, str)  # what Optuna's suggest_categorical takes


@dataclass(frozen=True)
class Distribution:
    """One ``search.space`` entry, checked once: a constant (any value that is not a mapping)
    or one of :data:`DISTRIBUTIONS`. The random sampler (:meth:`sample`) and Optuna
    (:meth:`suggest`) draw from the same set of values:

    - ``choice: [a, b, ...]``: one of the options;
    - ``uniform: [low, high]``, ``loguniform: [low, high]`` (low > 0): a float in [low, high];
    - ``randint: [low, high]``: an integer in [low, high), as Python's ``range``;
    - ``quniform: [low, high, q]``: ``low + i * q`` up to high (q defaults to 1; high - low
      must be a multiple of q); integers when low, high and q are.
    """

    kind: str
    args: tuple[Any, ...] = ()

    def sample(self, rng: random.Random) -> Any:
        """A random draw (the ``random`` searcher)."""
        if self.kind == "constant":
            return self.args[0]
        if self.kind == "choice":
            return rng.choice(self.args)
        lo, hi = self.args[0], self.args[1]
        if self.kind == "uniform":
            return rng.uniform(lo, hi)
        if self.kind == "loguniform":
            return math.exp(rng.uniform(math.log(lo), math.log(hi)))
        if self.kind == "randint":
            return rng.randint(int(lo), int(hi) - 1)
        return self._step_value(rng.randint(0, self._steps()))

    def suggest(self, trial: Any, name: str) -> Any:
        """Optuna's define-by-run draw (``trial`` is an ``optuna.Trial``) under ``name``."""
        if self.kind == "constant":
            return self.args[0]
        if self.kind == "choice":
            if all(isinstance(o, _SCALARS) for o in self.args):
                return trial.suggest_categorical(name, list(self.args))
            shown = [show(o, 60) for o in self.args]  # lists: Optuna sees their text
            return self.args[shown.index(trial.suggest_categorical(name, shown))]
        lo, hi = self.args[0], self.args[1]
        if self.kind in ("uniform", "loguniform"):
            return trial.suggest_float(name, lo, hi, log=self.kind == "loguniform")
        if self.kind == "randint":
            return trial.suggest_int(name, int(lo), int(hi) - 1)
        if self._integral():
            return trial.suggest_int(name, lo, hi, step=self.args[2])
        value = trial.suggest_float(name, lo, hi, step=self.args[2])
        return self._step_value(round((value - lo) / self.args[2]))

    def _integral(self) -> bool:
        return all(isinstance(a, int) and not isinstance(a, bool) for a in self.args)

    def _steps(self) -> int:
        return round((self.args[1] - self.args[0]) / self.args[2])

    def _step_value(self, i: int) -> Any:
        lo, q = self.args[0], self.args[2]
        return lo + i * q if self._integral() else float(f"{lo + i * q:.12g}")


def _number(value: Any) -> Optional[int | float]:
    """A finite int or float (YAML reads ``1e-3`` as text: such text is converted), else None."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    return value if finite(value) else None


def parse_distribution(raw: Any, where: str, path: str) -> Distribution:
    """The one parser of the distribution syntax (both searchers); errors name ``where``."""
    if not isinstance(raw, dict):
        return Distribution("constant", (raw,))
    if len(raw) != 1 or next(iter(raw)) not in DISTRIBUTIONS:
        keys = ", ".join(show(k, 40) for k in raw) or "none"
        raise ConfigError(
            where,
            f"a mapping must be one distribution, {sorted(DISTRIBUTIONS)} "
            f"(got keys: {keys}); a constant is a plain value",
            path,
        )
    kind, args = next(iter(raw.items()))
    if kind == "choice":
        if not isinstance(args, list) or not args:
            raise ConfigError(where, "choice needs a non-empty list", path)
        return Distribution(kind, tuple(args))
    sizes = (2, 3) if kind == "quniform" else (2,)
    need = "[low, high] or [low, high, q]" if kind == "quniform" else "[low, high]"
    if not isinstance(args, list) or len(args) not in sizes:
        raise ConfigError(where, f"{kind} needs {need}", path)
    nums = [_number(a) for a in args]
    if any(a is None for a in nums):
        raise ConfigError(where, f"{kind} needs finite numbers {need}, got {show(args)}", path)
    args = nums
    lo, hi = args[0], args[1]
    if not lo < hi:
        raise ConfigError(where, f"{kind} needs finite low < high, got {show(args)}", path)
    if kind == "randint" and not (float(lo).is_integer() and float(hi).is_integer()):
        raise ConfigError(where, f"randint needs integer bounds, got {show(args)}", path)
    if kind == "loguniform" and lo <= 0:
        raise ConfigError(where, "loguniform needs low > 0", path)
    if kind == "quniform":
        q = args[2] if len(args) == 3 else 1
        steps = (hi - lo) / q if q > 0 else 0.0
        if q <= 0 or abs(steps - round(steps)) > 1e-9 * max(1.0, steps):
            raise ConfigError(
                where, f"quniform needs q > 0 that divides high - low, got {show(args)}", path
            )
        return Distribution(kind, (lo, hi, q))
    return Distribution(kind, (float(lo), float(hi)))


@dataclass(frozen=True)
class SearchSpace:
    """A parsed ``search.space``: shared entries, and per-regularizer branches (a key named
    after a regularizer) that apply only when that regularizer is drawn. Optuna sees a branch's
    settings as ``<regularizer>.<key>``, so each branch is a separate parameter."""

    entries: dict[str, Distribution]
    branches: dict[str, dict[str, Distribution]]

    def sample(self, rng: random.Random) -> dict[str, Any]:
        """One random draw (the ``random`` searcher, and the checks of an Optuna space)."""
        return self._draw(lambda name, dist: dist.sample(rng))

    def suggest(self, trial: Any) -> dict[str, Any]:
        """One Optuna draw (define-by-run); the same walk as :meth:`sample`."""
        return self._draw(lambda name, dist: dist.suggest(trial, name))

    def _draw(self, pick: Callable[[str, Distribution], Any]) -> dict[str, Any]:
        out = {key: pick(key, dist) for key, dist in self.entries.items()}
        reg = out.get("regularizer")
        branch = self.branches.get(reg) if isinstance(reg, str) else None
        for key, dist in (branch or {}).items():
            out[key] = pick(f"{reg}.{key}", dist)
        return out


def parse_space(space: Any, path: str) -> SearchSpace:
    """Parse and check a ``search.space`` mapping (every key a trial setting or a regularizer
    branch of settings; every value a constant or a distribution)."""
    if not isinstance(space, dict) or not space:
        raise ConfigError("search.space", "must be a non-empty mapping of distributions", path)
    entries: dict[str, Distribution] = {}
    branches: dict[str, dict[str, Distribution]] = {}
    conditional = {k: v for k, v in space.items() if k in list_regularizers()}
    for key, raw in space.items():
        if key in conditional:
            if not isinstance(raw, dict):
                raise ConfigError(
                    f"search.space.{key}",
                    f"must be a mapping of settings that apply when regularizer is {key}",
                    path,
                )
            for sub, dist in raw.items():
                check_setting_key(sub, f"search.space.{key}", path)
                branches.setdefault(key, {})[sub] = parse_distribution(
                    dist, f"search.space.{key}.{key_name(sub)}", path
                )
            continue
        check_setting_key(key, "search.space", path)
        entries[key] = parse_distribution(raw, f"search.space.{key_name(key)}", path)
    return SearchSpace(entries, branches)


def sample_space(
    space: SearchSpace | dict[str, Any], rng: random.Random, path: str
) -> dict[str, Any]:
    """Draw one flat config from a (possibly conditional) space (parsed, or its mapping)."""
    parsed = space if isinstance(space, SearchSpace) else parse_space(space, path)
    return parsed.sample(rng)
