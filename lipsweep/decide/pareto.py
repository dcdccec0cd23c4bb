"""Pareto ranking of sweep trials, the export selection rule, and the front as text and JSON.

A *record* is one trial (one MLflow child run) as a plain mapping::

    {"run_id": "3f2a...", "run_name": "trial_0007",            # run_name optional
     "metrics": {"acc_clean": 90.94, "acc_pgd_4": 15.39, ...},  # docs/contract.md names
     "params": {"regularizer": "none", "seed": "0", ...}}  # flat config (docs/contract.md params)

Contract (what `lipsweep pareto` relies on):

- *Dominance.* Turn every objective into "larger is better" (negate the ``min`` ones). Run a
  dominates run b iff a >= b on every objective and a > b on at least one. Identical points do not
  dominate each other, so they always share a rank.
- *Ranks.* 1 is the non-dominated front, 2 the front once rank 1 is removed, and so on: the
  non-dominated sort of NSGA-II (Deb et al., IEEE TEC 2002). 0 means "not ranked".
- *Missing and non-finite values.* A run that lacks an objective metric, or whose value is NaN,
  +-inf or not a number, is not ranked (rank 0), takes no part in any dominance comparison (so it
  never changes the ranks of the others), and is reported as excluded with the reason. A
  non-finite accuracy or Lipschitz value is a failed measurement, not a worst case: ranking it
  would let a broken evaluation shape the front.
- *Export selection* lives in :mod:`lipsweep.decide.selection`: ``select_from_front`` picks one
  front-1 run by a rule (grammar in :func:`parse_selection_rule`;
  default ``pgd4-within-clean:1.0``: the highest acc_pgd_4 among
  front runs within 1 point of the front's best acc_clean).

The commands rank once, through :func:`lipsweep.decide.front.build_front`, whose
:class:`~lipsweep.decide.front.Front` every view reads. The pieces, on their own::

    res = pareto_rank(records, resolve_objectives(["acc_clean:max", "acc_pgd_4:max"]))
    print(format_front_table(res.trials, res.ranks, res.values, res.excluded, res.objectives))
    sel = lipsweep.decide.selection.select_from_front(records, res.ranks)
    doc = front_doc(res.trials, res.ranks, res.values, res.excluded, res.objectives, sel)
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from lipsweep.core.config_base import ConfigError
from lipsweep.core.dominance import (  # noqa: F401 (re-exported: numpy-only home, shared)
    DIRECTIONS,
    _dominance,
    non_dominated_ranks,
)
from lipsweep.core.metric_names import ACC_CLEAN, ACC_PREFIX, LIP_JACOBIAN_MEDIAN, attack_metric
from lipsweep.regularizers import find_spec, shown_params


class SelectionLike(Protocol):
    """What :func:`front_doc` needs of :class:`lipsweep.decide.selection.Selection` (selection
    imports this module, not the other way round)."""

    def as_dict(self) -> dict[str, Any]: ...


_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-/]+(?: [A-Za-z0-9_.\-/]+)*$")  # MLflow metric characters


@dataclass(frozen=True)
class Objective:
    """One axis of the front: an MLflow metric and whether larger or smaller is better."""

    name: str
    """Metric name as logged (docs/contract.md), e.g. ``acc_pgd_4``."""
    direction: str
    """``"max"`` (larger is better) or ``"min"`` (smaller is better)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ConfigError(
                "objective",
                f"metric name {self.name!r} may contain only letters, "
                "digits, '_', '-', '.', '/' and inner spaces",
            )
        if self.direction not in DIRECTIONS:
            raise ConfigError(
                "objective",
                f"direction of {self.name!r} must be 'max' or 'min', got {self.direction!r}",
            )

    def __str__(self) -> str:
        return f"{self.name}:{self.direction}"


DEFAULT_OBJECTIVES: tuple[Objective, ...] = (
    Objective(ACC_CLEAN, "max"),
    Objective(attack_metric("pgd", 4), "max"),
    Objective(attack_metric("aa", 2), "max"),
    Objective(LIP_JACOBIAN_MEDIAN, "min"),
)


def parse_objective(spec: str) -> Objective:
    """Parse ``"NAME:max"`` or ``"NAME:min"`` (direction case-insensitive) into an Objective.

    Raises ConfigError (a ValueError, field ``objective``) naming the bad part of ``spec``.
    """
    if not isinstance(spec, str):
        raise ConfigError("objective", f"expected 'NAME:max' or 'NAME:min', got {spec!r}")
    name, sep, direction = spec.strip().rpartition(":")
    name, direction = name.strip(), direction.strip().lower()
    if not sep:
        raise ConfigError(
            "objective",
            f"{spec!r} has no direction: write '{spec.strip()}:max' or '{spec.strip()}:min'",
        )
    if not name:
        raise ConfigError(
            "objective", f"{spec!r} has no metric name before ':' (expected NAME:max or NAME:min)"
        )
    if ":" in name:
        raise ConfigError(
            "objective", f"{spec!r} has more than one ':' (expected NAME:max or NAME:min)"
        )
    if direction not in DIRECTIONS:
        raise ConfigError(
            "objective", f"direction {direction!r} in {spec!r} must be 'max' or 'min'"
        )
    return Objective(name, direction)


def resolve_objectives(specs: Sequence[str | Objective] | None) -> tuple[Objective, ...]:
    """Objectives from CLI strings or Objective instances; None or empty gives the defaults.

    Raises ConfigError (field ``objective``) for a bad spec or a metric given twice.
    """
    if isinstance(specs, (str, Objective)):
        specs = [specs]
    if not specs:
        return DEFAULT_OBJECTIVES
    objs = tuple(s if isinstance(s, Objective) else parse_objective(s) for s in specs)
    seen: set[str] = set()
    for o in objs:
        if o.name in seen:
            raise ConfigError("objective", f"metric {o.name!r} is given more than once")
        seen.add(o.name)
    return objs


# --------------------------------------------------------------------------- ranking


@dataclass(frozen=True)
class Trial:
    """A validated record: one MLflow child run."""

    run_id: str
    run_name: str
    metrics: Mapping[str, Any]
    params: Mapping[str, Any]


def as_trials(records: Sequence[Mapping[str, Any] | Trial]) -> list[Trial]:
    """Validate records (see the module docstring); raises ValueError naming the bad record."""
    out: list[Trial] = []
    seen: set[str] = set()
    for i, r in enumerate(records):
        if not isinstance(r, Trial):
            if not isinstance(r, Mapping):
                raise ValueError(f"records[{i}] must be a mapping, got {type(r).__name__}")
            rid, metrics, params = r.get("run_id"), r.get("metrics", {}), r.get("params", {})
            if not isinstance(metrics, Mapping) or not isinstance(params, Mapping):
                raise ValueError(f"records[{i}]: 'metrics' and 'params' must be mappings")
            if not isinstance(rid, str) or not rid:
                raise ValueError(f"records[{i}] needs a non-empty string 'run_id', got {rid!r}")
            r = Trial(rid, str(r.get("run_name") or ""), metrics, params)
        if r.run_id in seen:
            raise ValueError(f"records[{i}]: run_id {r.run_id!r} appears more than once")
        seen.add(r.run_id)
        out.append(r)
    return out


def _as_float(x: Any) -> float | None:
    """A metric or param value as float (MLflow params are strings); None if not a number.

    MLflow's stores cannot hold infinities: they keep +-inf as +-1.7976931348623157e308, the
    largest double, which reads back finite. That value is turned back into +-inf here, so
    an infinite metric is never ranked (a real metric is never that large)."""
    if isinstance(x, bool) or x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return math.copysign(math.inf, v) if abs(v) == sys.float_info.max else v


def metric_value(trial: Trial, name: str) -> float | None:
    """The finite value of metric ``name`` for ``trial``, else None."""
    v = _as_float(trial.metrics.get(name))
    return v if v is not None and math.isfinite(v) else None


def objective_values(
    records: Sequence[Mapping[str, Any] | Trial], objectives: Sequence[Objective]
) -> tuple[np.ndarray, dict[str, str]]:
    """(n, m) objective matrix, NaN where a value is unusable, and {run_id: exclusion reason}."""
    trials = as_trials(records)
    values = np.full((len(trials), len(objectives)), np.nan)
    reasons: dict[str, str] = {}
    for i, t in enumerate(trials):
        missing = [o.name for o in objectives if o.name not in t.metrics]
        why = (
            [f"missing metric{'s' if len(missing) > 1 else ''} {', '.join(missing)}"]
            if missing
            else []
        )
        for j, o in enumerate(objectives):
            if o.name not in t.metrics:
                continue
            v = _as_float(t.metrics[o.name])
            if v is None:
                why.append(f"{o.name} is not a number: {t.metrics[o.name]!r}")
            elif not math.isfinite(v):
                why.append(f"{o.name} is {v}")
            else:
                values[i, j] = v
        if why:
            reasons[t.run_id] = "; ".join(why)
    return values, reasons


@dataclass(frozen=True)
class ParetoResult:
    """Output of :func:`pareto_rank`; ``ranks`` and ``values`` follow the input order."""

    trials: tuple[Trial, ...]
    objectives: tuple[Objective, ...]
    values: np.ndarray
    """(n, m) objective values; NaN where unusable."""
    ranks: np.ndarray
    """(n,) front ranks; 0 = not ranked."""
    excluded: dict[str, str]
    """run_id -> why the run is not ranked."""

    @property
    def front(self) -> list[Trial]:
        return [t for t, r in zip(self.trials, self.ranks) if r == 1]


def pareto_rank(
    records: Sequence[Mapping[str, Any] | Trial],
    objectives: Sequence[Objective | str] = DEFAULT_OBJECTIVES,
) -> ParetoResult:
    """Rank trial records over ``objectives`` (Objective or ``"NAME:max|min"``; the module
    docstring states the contract)."""
    objs = resolve_objectives(objectives)
    trials = as_trials(records)
    values, reasons = objective_values(trials, objs)
    ranks = non_dominated_ranks(values, [o.direction for o in objs])
    return ParetoResult(tuple(trials), objs, values, ranks, reasons)


def check_ranks(ranks: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """``ranks`` as an int array of length ``n`` with values >= 0, or ValueError."""
    r = np.asarray(ranks)
    if r.shape != (n,) or (n and (not np.issubdtype(r.dtype, np.integer) or r.min() < 0)):
        raise ValueError(
            f"ranks must hold one non-negative integer per record ({n}), got "
            f"shape {r.shape}, dtype {r.dtype}"
        )
    return r.astype(np.int64)


# --------------------------------------------------------------------------- labels and output


def _reg_params(reg: str) -> tuple[str, ...]:
    """The params a regularizer's spec shows (docs/science.md §1.2, §2.3); an unknown or missing
    regularizer shows every registered one that was logged."""
    spec = find_spec(reg)
    return spec.shown if spec is not None else shown_params()


def _fmt_param(v: Any) -> str:
    """Param value for display: ``0.001`` -> ``1e-3``, ``10.0`` -> ``10``, ``None`` -> ``""``."""
    if v is None or str(v).strip() in ("", "None", "null"):
        return ""
    x = _as_float(v)
    if x is None or not math.isfinite(x):
        return str(v)
    if x == int(x) and abs(x) < 1e6:
        return str(int(x))
    if abs(x) < 0.1:
        mant, exp = f"{x:.3e}".split("e")
        return f"{mant.rstrip('0').rstrip('.')}e{int(exp)}"
    return f"{x:g}"


def applicable_params(params: Mapping[str, Any]) -> dict[str, str]:
    """The regularizer's own params (formatted, in canonical order) that were logged."""
    reg = str(params.get("regularizer", "") or "")
    names = _reg_params(reg)
    return {n: _fmt_param(params[n]) for n in names if _fmt_param(params.get(n))}


def config_label(params: Mapping[str, Any]) -> str:
    """Short human label of a trial's config, in the paper's notation (Tables 3, 4)."""
    reg = str(params.get("regularizer", "") or "")
    p = applicable_params(params)
    spec = find_spec(reg)
    if spec is not None:
        return spec.paper_label(p)
    body = " ".join(f"{k}={v}" for k, v in p.items())
    return f"{reg or '?'} {body}".strip()


def fmt_value(name: str, v: float | None) -> str:
    """Metric for display: accuracies (percent) with 2 decimals, others 4 significant digits."""
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:.2f}" if name.startswith(ACC_PREFIX) else f"{v:#.4g}".rstrip(".")


def _ordered(
    trials: Sequence[Trial], ranks: np.ndarray, values: np.ndarray, objectives: Sequence[Objective]
) -> list[int]:
    """Ranked indices by (rank, first objective best first, run_id): the display order."""
    s = 1.0 if objectives[0].direction == "max" else -1.0
    idx = [i for i in range(len(trials)) if ranks[i] > 0]
    return sorted(idx, key=lambda i: (ranks[i], -s * values[i, 0], trials[i].run_id))


def format_front_table(
    trials: Sequence[Trial],
    r: np.ndarray,
    values: np.ndarray,
    reasons: Mapping[str, str],
    objs: Sequence[Objective],
    max_rank: int = 1,
) -> str:
    """Plain-text aligned table of the runs with rank <= ``max_rank``, then a count line and the
    runs that are not ranked, with the reason (for the terminal), from validated trials, their
    ranks ``r`` and the objective ``values`` and exclusion ``reasons`` already read
    (:class:`ParetoResult`'s, for a built front)."""
    rows_idx = [i for i in _ordered(trials, r, values, objs) if r[i] <= max_rank]
    shown = {i: applicable_params(trials[i].params) for i in rows_idx}
    pcols = [n for n in shown_params() if any(n in p for p in shown.values())]
    named = any(trials[i].run_name for i in rows_idx)
    head = ["rank", "run_id"] + (["run_name"] if named else []) + ["regularizer"] + pcols
    head += [f"{o.name}({o.direction})" for o in objs]
    right = [True, False] + ([False] if named else []) + [False] * (1 + len(pcols))
    right += [True] * len(objs)
    rows = []
    for i in rows_idx:
        t = trials[i]
        row = [str(r[i]), t.run_id[:8]] + ([t.run_name] if named else [])
        row += [str(t.params.get("regularizer", "") or "?")] + [shown[i].get(n, "") for n in pcols]
        rows.append(row + [fmt_value(o.name, values[i, j]) for j, o in enumerate(objs)])
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if rt else c.ljust(w) for c, w, rt in zip(cells, widths, right)
        ).rstrip()

    out = [line(head), line(["-" * w for w in widths])] + [line(row) for row in rows]
    n_front, n_ranked = int((r == 1).sum()), int((r > 0).sum())
    out.append(
        f"{n_front} of {n_ranked} ranked runs on the front; {len(trials) - n_ranked} of "
        f"{len(trials)} runs not ranked"
    )
    for t, rk in zip(trials, r):
        if rk == 0:
            out.append(f"  not ranked: {t.run_id} ({reasons.get(t.run_id, 'no rank given')})")
    return "\n".join(out)


def front_doc(
    trials: Sequence[Trial],
    r: np.ndarray,
    values: np.ndarray,
    reasons: Mapping[str, str],
    objs: Sequence[Objective],
    selection: SelectionLike | None = None,
) -> dict[str, Any]:
    """JSON-serialisable summary for the ``pareto.json`` artifact (strict JSON: no NaN/inf) of
    validated trials, their ranks ``r`` and the objective ``values`` and exclusion ``reasons``
    already read (:class:`ParetoResult`'s, for a built front).

    Deterministic and independent of the order of the trials: runs are sorted by (rank, run_id),
    the not-ranked ones last; no timestamps. Keys: ``schema_version``, ``objectives``,
    ``counts``, ``front`` (run_ids), ``runs`` (run_id, run_name, rank, label, params, values),
    ``excluded`` (run_id, reason) and ``selection`` (None unless given)."""
    order = sorted(range(len(trials)), key=lambda i: (r[i] == 0, r[i], trials[i].run_id))
    runs = [
        {
            "run_id": trials[i].run_id,
            "run_name": trials[i].run_name,
            "rank": int(r[i]),
            "label": config_label(trials[i].params),
            "params": {
                "regularizer": str(trials[i].params.get("regularizer", "") or ""),
                **applicable_params(trials[i].params),
            },
            "values": {
                o.name: (float(values[i, j]) if math.isfinite(values[i, j]) else None)
                for j, o in enumerate(objs)
            },
        }
        for i in order
    ]
    return {
        "schema_version": 1,
        "objectives": [{"name": o.name, "direction": o.direction} for o in objs],
        "counts": {
            "runs": len(trials),
            "ranked": int((r > 0).sum()),
            "front": int((r == 1).sum()),
            "excluded": int((r == 0).sum()),
        },
        "front": sorted(t.run_id for t, rk in zip(trials, r) if rk == 1),
        "runs": runs,
        "excluded": [
            {"run_id": trials[i].run_id, "reason": reasons.get(trials[i].run_id, "no rank given")}
            for i in order
            if r[i] == 0
        ],
        "selection": None if selection is None else selection.as_dict(),
    }
