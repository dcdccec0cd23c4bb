"""Arms: trials whose flat configs differ only in ``seed``, and their statistics over seeds.

An *arm* is one configuration run under several seeds. Its key is the run's flat config (the
MLflow params, docs/contract.md) without ``seed``, each value normalised (numbers compared as
floats, ``None``/``null``/empty as one value), so ``lam=0.01`` and ``lam=1e-2`` are one arm.

Statistics (Student 1908; any statistics text, e.g. Wasserman, *All of Statistics*, §10.3):

- per arm and metric: n (runs with a finite value), mean, sample std (ddof = 1) and the 95%
  t-interval ``mean +- t_{0.975, n-1} * std / sqrt(n)`` (undefined, NaN, for n < 2), its ends
  clipped to the values the metric can take (:func:`metric_bounds`: an accuracy lies in
  [0, 100], a Lipschitz estimate is >= 0). With 2 seeds t_{0.975, 1} = 12.7, so an accuracy
  interval reaches below 0 whenever the two runs differ by more than mean / 6.35; the true
  mean lies within the bounds, so the clipped interval keeps its 95% coverage;
- paired difference of an arm to the baseline arm, matched by seed (same seed = same
  initialisation, batch order and augmentation): ``d_s = arm_s - base_s`` over the seeds both
  have, its mean, std, 95% t-interval, and the two-sided paired t-test p-value
  ``2 * P(T_{n-1} > |mean / (std / sqrt(n))|)``.

Ranking arms (``lipsweep pareto``): :func:`arm_record` turns each arm into a pareto record
whose metrics are the arm's means, so :func:`lipsweep.decide.pareto.pareto_rank` ranks arms exactly
as it ranks runs (:func:`lipsweep.decide.front.build_front` does, once per command).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from lipsweep.core.metric_names import ACC_PREFIX, LIP_PREFIX, PROBE_PREFIX
from lipsweep.decide.pareto import Objective, Trial, _as_float, as_trials, config_label, fmt_value

_log = logging.getLogger("lipsweep.decide")
SEED_PARAM = "seed"
LEVEL = 0.95
"""Coverage of every interval reported here."""


def _norm_value(v: Any) -> str:
    """A param value in canonical form: numbers as float repr, null-likes as ''."""
    s = "" if v is None else str(v).strip()
    if s in ("", "None", "null"):
        return ""
    if s in ("True", "true", "False", "false"):
        return s.lower()
    x = _as_float(s)
    return s if x is None else repr(x)


def arm_key(params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The arm of a run: its normalised flat config without ``seed``, as sorted pairs."""
    return tuple(sorted((str(k), _norm_value(v)) for k, v in params.items() if k != SEED_PARAM))


def _seed(t: Trial) -> Any:
    s = _as_float(t.params.get(SEED_PARAM))
    return int(s) if s is not None and s == int(s) else t.params.get(SEED_PARAM)


@dataclass(frozen=True)
class Arm:
    """One configuration over its seeds."""

    arm_id: str
    """Short stable id: the first 10 hex digits of sha1 of the key."""
    name: str
    """Display name: the config label (the registry's paper-notation label), made unique."""
    key: tuple[tuple[str, str], ...]
    runs: tuple[Trial, ...]
    """Its runs, ordered by seed, then run_id."""

    @property
    def params(self) -> Mapping[str, Any]:
        return self.runs[0].params

    @property
    def seeds(self) -> list[Any]:
        return [_seed(t) for t in self.runs]

    @property
    def used_runs(self) -> tuple[Trial, ...]:
        """The runs its statistics use: the first run (by run id) of each seed."""
        seen: set[Any] = set()
        used = []
        for t in self.runs:
            if _seed(t) not in seen:
                seen.add(_seed(t))
                used.append(t)
        return tuple(used)

    @property
    def n(self) -> int:
        """How many runs its statistics use: one per distinct seed (what every ``n`` shown
        for an arm counts; a metric some runs lack has a smaller ``Stats.n``)."""
        return len(self.used_runs)

    @property
    def repeated_seeds(self) -> dict[Any, list[str]]:
        """{seed: run ids} for each seed that has more than one run (the first is used)."""
        by_seed: dict[Any, list[str]] = {}
        for t in self.runs:
            by_seed.setdefault(_seed(t), []).append(t.run_id)
        return {s: ids for s, ids in by_seed.items() if len(ids) > 1}

    def values(self, metric: str) -> dict[Any, float]:
        """{seed: finite value of ``metric``} (runs without one left out). A seed with several
        runs counts once, with its first run (by run id; :func:`group_arms` warns)."""
        out = {}
        for t in self.used_runs:
            v = _as_float(t.metrics.get(metric))
            if v is not None and math.isfinite(v):
                out[_seed(t)] = v
        return out


def group_arms(records: Sequence[Mapping[str, Any] | Trial]) -> list[Arm]:
    """Group runs into arms, ordered baseline first, then by name. Two arms with the same
    config label get the params that tell them apart appended, e.g. ``baseline (lr=0.001)``."""
    groups: dict[tuple, list[Trial]] = {}
    for t in as_trials(records):
        groups.setdefault(arm_key(t.params), []).append(t)
    labels = {k: config_label(ts[0].params) for k, ts in groups.items()}
    names = {}
    for k, label in labels.items():
        same = [k2 for k2, l2 in labels.items() if l2 == label]
        if len(same) == 1:
            names[k] = label
            continue
        differ = sorted(
            {n for k2 in same for n, v in k2 if dict(k).get(n) != v}
            | {n for k2 in same for n, _ in k2 if n not in dict(k)}
        )
        mine = dict(k)
        extra = ", ".join(f"{n}={mine.get(n, '')}" for n in differ)
        names[k] = f"{label} ({extra})"
    arms = []
    for k, ts in groups.items():
        digest = hashlib.sha1(json.dumps(k).encode()).hexdigest()[:10]
        ts = sorted(ts, key=lambda t: (str(_seed(t)).zfill(12), t.run_id))
        arm = Arm(digest, names[k], k, tuple(ts))
        for seed, ids in arm.repeated_seeds.items():
            _log.warning(
                "arm %s: seed %s has %d runs (%s); its statistics use run %s only, the "
                "others are left out (rerun the arm with distinct seeds to count them)",
                arm.name,
                seed,
                len(ids),
                ", ".join(ids),
                ids[0],
            )
        arms.append(arm)
    return sorted(arms, key=lambda a: (not is_baseline(a), a.name, a.arm_id))


def is_baseline(arm: Arm) -> bool:
    return str(arm.params.get("regularizer", "")) == "none"


def baseline_arm(arms: Sequence[Arm]) -> Arm | None:
    """The arm without a regularizer; with several, the one with the most runs (then name)."""
    base = [a for a in arms if is_baseline(a)]
    return min(base, key=lambda a: (-len(a.runs), a.name)) if base else None


def max_seeds(arms: Sequence[Arm]) -> int:
    """The most distinct seeds of any arm (two runs of one seed are one seed)."""
    return max((a.n for a in arms), default=0)


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Stats:
    """n, mean, sample std and the 95% t-interval [lo, hi] of a sample; p only for paired
    differences (two-sided paired t-test against 0). NaN where undefined."""

    n: int
    mean: float
    std: float
    lo: float
    hi: float
    p: float = math.nan


NO_STATS = Stats(0, math.nan, math.nan, math.nan, math.nan)
"""The statistics of a metric no run of the arm logged (what :func:`t_interval` gives for [])."""


@functools.lru_cache(maxsize=None)
def _t_quantile(df: int) -> float:
    from scipy.stats import t as student_t  # scipy: a dependency of mlflow

    return float(student_t.ppf(0.5 + LEVEL / 2, df))


def t_interval(values: Sequence[float]) -> Stats:
    """Mean, std (ddof 1) and the 95% t-interval of ``values`` (NaN entries dropped)."""
    a = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = len(a)
    if n == 0:
        return NO_STATS
    mean = float(a.mean())
    if n < 2:
        return Stats(1, mean, math.nan, math.nan, math.nan)
    std = float(a.std(ddof=1))
    half = _t_quantile(n - 1) * std / math.sqrt(n)
    return Stats(n, mean, std, mean - half, mean + half)


EPOCH_PREFIX = "epoch_"
"""Per-epoch copies of a final metric (``epoch_acc_clean``) keep its range."""


def metric_bounds(metric: str) -> tuple[float, float]:
    """The values ``metric`` can take: an accuracy (``acc_*``, also as ``probe_``/``epoch_``
    copy) is a percentage in [0, 100]; a Lipschitz estimate (``lip_*``: norms, ratios of
    norms, fractions) is >= 0; any other metric is unbounded."""
    name = metric.removeprefix(PROBE_PREFIX).removeprefix(EPOCH_PREFIX)
    if name.startswith(ACC_PREFIX):
        return 0.0, 100.0
    if name.startswith(LIP_PREFIX):
        return 0.0, math.inf
    return -math.inf, math.inf


def metric_interval(values: Sequence[float], metric: str) -> Stats:
    """:func:`t_interval` of one metric's values over seeds, its ends clipped to
    :func:`metric_bounds` (the true mean lies within them, so coverage is kept)."""
    s = t_interval(values)
    if s.n < 2:
        return s
    low, high = metric_bounds(metric)
    return Stats(s.n, s.mean, s.std, min(max(s.lo, low), high), max(min(s.hi, high), low))


SPREAD_RTOL = 1e-9
"""A spread of paired differences below this fraction of their largest magnitude is rounding,
not spread: differences of float64 values of size M carry errors ~1e-16 M, so "the arm is 3
images better on every seed" gives 0.5999999999999943 and 0.6000000000000085 (std 7.8e-15),
which a t-test would call p = 7e-57. Real measurements never agree to 9 digits."""


def _no_spread(s: Stats, diffs: Sequence[float]) -> bool:
    """True when the std of ``diffs`` is zero up to rounding (:data:`SPREAD_RTOL`)."""
    scale = max((abs(v) for v in diffs if v is not None and math.isfinite(v)), default=0.0)
    return not s.std > SPREAD_RTOL * scale


def paired_t(diffs: Sequence[float]) -> Stats:
    """:func:`t_interval` of paired differences plus the two-sided p-value of H0: mean 0.
    With no spread (every pair differs by the same amount, common with a few seeds and
    accuracies on few images; equal up to rounding, :data:`SPREAD_RTOL`) the t statistic is
    undefined and so is p: NaN, not 0."""
    s = t_interval(diffs)
    if s.n < 2 or _no_spread(s, diffs):
        return s
    from scipy.stats import t as student_t

    tstat = s.mean / (s.std / math.sqrt(s.n))
    p = float(2 * student_t.sf(abs(tstat), s.n - 1))
    return Stats(s.n, s.mean, s.std, s.lo, s.hi, p)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979, "A simple sequentially rejective multiple
    test procedure"): the i-th smallest of m becomes max over j <= i of min(1, (m - j + 1) p_j).
    Rejecting where the adjusted p < alpha bounds the family-wise error at alpha for any
    dependence between the tests. NaN entries (no test) pass through and do not count in m."""
    idx = sorted((i for i, p in enumerate(pvalues) if math.isfinite(p)), key=lambda i: pvalues[i])
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (len(idx) - rank) * pvalues[i]))
        out[i] = running
    return out


POWER = 0.8
"""The power :func:`seeds_for_power` plans for (the usual 80 %)."""
MAX_PLANNED_SEEDS = 200


def paired_t_power(n: int, d: float, alpha: float) -> float:
    """Power of the two-sided paired t-test at level ``alpha`` with ``n`` pairs when the true
    standardised mean difference (Cohen's d = mean / sd of the differences) is ``d``: the
    noncentral t with n - 1 degrees of freedom and noncentrality d sqrt(n) (Cohen 1988, ch. 2),
    P(T > crit) + P(T < -crit). The lower tail is taken as P(-T > crit), -T being noncentral t
    with noncentrality -d sqrt(n): scipy's ``nct.cdf(-crit, df, nc)`` returns NaN at large nc
    (d = 5.5, n = 2..5), its ``sf`` does not (checked against mpmath in the tests)."""
    from scipy.stats import nct
    from scipy.stats import t as student_t

    df, nc = n - 1, d * math.sqrt(n)
    crit = float(student_t.ppf(1 - alpha / 2, df))
    return float(nct.sf(crit, df, nc) + nct.sf(crit, df, -nc))


def seeds_for_power(
    diffs: Sequence[float], alpha: float, power: float = POWER, max_n: int = MAX_PLANNED_SEEDS
) -> int | None:
    """Pairs (seeds per arm) a two-sided paired t-test at level ``alpha`` needs for ``power``
    if the true mean and spread of the differences were the observed ones. A planning guide,
    not a promise: from a few seeds the observed d is itself uncertain, and the effects that
    look largest are the likeliest to be overestimated. None when d is undefined (fewer than
    2 differences, or no spread, :data:`SPREAD_RTOL`) or zero; ``max_n + 1`` when more than
    ``max_n`` are needed."""
    s = t_interval(diffs)
    if s.n < 2 or _no_spread(s, diffs) or s.mean == 0:
        return None
    d = abs(s.mean) / s.std
    for n in range(2, max_n + 1):
        if paired_t_power(n, d, alpha) >= power:
            return n
    return max_n + 1


def arm_stats(arm: Arm, metric: str) -> Stats:
    """The arm's statistics on ``metric`` over its seeds (:func:`metric_interval`)."""
    return metric_interval(list(arm.values(metric).values()), metric)


def paired_values(arm: Arm, base: Arm, metric: str, relative: bool = False) -> list[float]:
    """Per seed both arms ran (in seed order): ``arm - base`` on ``metric``, or with
    ``relative`` ``100 * (arm / base - 1)`` in percent (seeds whose base value is 0 left out)."""
    a, b = arm.values(metric), base.values(metric)
    seeds = [s for s in sorted(a, key=str) if s in b and not (relative and b[s] == 0)]
    if relative:
        return [100.0 * (a[s] / b[s] - 1.0) for s in seeds]
    return [a[s] - b[s] for s in seeds]


def paired_difference(arm: Arm, base: Arm, metric: str) -> Stats:
    """``arm - base`` on ``metric``, matched by seed (seeds missing in either are left out)."""
    return paired_t(paired_values(arm, base, metric))


def paired_relative(arm: Arm, base: Arm, metric: str) -> Stats:
    """``100 * (arm / base - 1)`` on ``metric`` in percent, matched by seed, with the paired
    t-test of H0: no relative change. For a scale such as the median ||J_f|| whose baseline
    moves between seeds, this is the sharper test when an arm scales it by a similar factor on
    every seed. Seeds whose baseline value is 0 are left out (no ratio)."""
    return paired_t(paired_values(arm, base, metric, relative=True))


# --------------------------------------------------------------------------- ranking


def arm_records(arms: Sequence[Arm], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """One pareto record per arm: run_id = arm_id, run_name = ``n=<seeds>`` (figures label a
    point with its config and run_name), metrics = the means."""
    return [arm_record(a, {m: arm_stats(a, m) for m in metrics}) for a in arms]


def arm_record(arm: Arm, stats: Mapping[str, Stats]) -> dict[str, Any]:
    """:func:`arm_records` of one arm whose ``stats`` per metric are already computed (metrics
    with no finite value, n = 0, are left out)."""
    return {
        "run_id": arm.arm_id,
        "run_name": f"n={arm.n}",
        "params": dict(arm.params),
        "metrics": {m: s.mean for m, s in stats.items() if s.n},
    }


def fmt_stats(name: str, s: Stats) -> str:
    """``mean [lo, hi]`` for display (``mean`` alone when n < 2)."""
    if s.n == 0:
        return "-"
    if s.n < 2:
        return fmt_value(name, s.mean)
    return f"{fmt_value(name, s.mean)} [{fmt_value(name, s.lo)}, {fmt_value(name, s.hi)}]"


def arm_table(
    arms: Sequence[Arm],
    ranks: Sequence[int] | np.ndarray,
    objectives: Sequence[Objective],
    max_rank: int = 1,
    stats: Sequence[Mapping[str, Stats]] | None = None,
) -> str:
    """Plain-text table of the arms with rank <= ``max_rank``: rank, arm, n (the runs the
    statistics use: one per seed), and per objective the mean with its 95% t-interval; then
    a count line and the arms not ranked. ``stats``:
    each arm's statistics per metric when already computed (a built front's)."""
    r = [int(x) for x in ranks]

    def st(i: int, name: str) -> Stats:
        return arm_stats(arms[i], name) if stats is None else stats[i].get(name, NO_STATS)

    s0 = 1.0 if objectives[0].direction == "max" else -1.0
    shown = sorted(
        (i for i in range(len(arms)) if 0 < r[i] <= max_rank),
        key=lambda i: (r[i], -s0 * st(i, objectives[0].name).mean, arms[i].arm_id),
    )
    head = ["rank", "arm", "n"] + [f"{o.name}({o.direction}) mean [95% CI]" for o in objectives]
    rows = [
        [str(r[i]), arms[i].name, str(arms[i].n)]
        + [fmt_stats(o.name, st(i, o.name)) for o in objectives]
        for i in shown
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    right = [True, False, True] + [True] * len(objectives)

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if rt else c.ljust(w) for c, w, rt in zip(cells, widths, right)
        ).rstrip()

    out = [line(head), line(["-" * w for w in widths])] + [line(row) for row in rows]
    n_runs = sum(len(a.runs) for a in arms)
    out.append(
        f"{sum(x == 1 for x in r)} of {sum(x > 0 for x in r)} ranked arms on the front "
        f"({n_runs} runs in {len(arms)} arms, ranked by their means over seeds)"
    )
    for a, rk in zip(arms, r):
        if rk == 0:
            out.append(f"  not ranked: {a.name} (no finite mean for every objective)")
    return "\n".join(out)
