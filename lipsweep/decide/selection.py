"""Export selection: which front run ``lipsweep export`` picks, by a documented rule.

Grammar in :func:`parse_selection_rule`; the default ``pgd4-within-clean:1.0`` takes the
highest acc_pgd_4 among front-1 runs within 1 point of the front's best acc_clean. Ties go to
higher acc_aa_2, then lower lip_jacobian_median, then the smaller run_id.

Over arms (:mod:`lipsweep.decide.arms`, when an arm has two or more seeds),
:func:`select_from_arm_front` applies the same rule to the front arms' MEAN metrics to choose
an arm, then takes that arm's most typical run: the one whose goal metric is closest to the arm's
mean (ties: smaller seed, then smaller run_id). Not its best seed: picking the luckiest seed
would undo the averaging that chose the arm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from lipsweep.core.config_base import ConfigError
from lipsweep.core.metric_names import LIP_JACOBIAN_MEDIAN, attack_metric
from lipsweep.decide.pareto import (
    DIRECTIONS,
    Objective,
    Trial,
    as_trials,
    check_ranks,
    fmt_value,
    metric_value,
)

if TYPE_CHECKING:  # pragma: no cover
    from lipsweep.decide.arms import Arm

DEFAULT_SELECT_RULE = "pgd4-within-clean:1.0"
TIE_BREAK: tuple[Objective, ...] = (
    Objective(attack_metric("aa", 2), "max"),
    Objective(LIP_JACOBIAN_MEDIAN, "min"),
)
"""After the rule's goal: higher acc_aa_2, then lower lip_jacobian_median, then smaller run_id."""
SHORTHANDS: dict[str, tuple[str, float]] = {
    "pgd4-within-clean": ("max:acc_pgd_4,within:acc_clean:{x}", 1.0),
}
"""Named rules: name -> (expansion with ``{x}``, default x)."""


@dataclass(frozen=True)
class SelectionRule:
    """A parsed export selection rule (grammar in :func:`parse_selection_rule`)."""

    text: str
    goal: Objective
    within: tuple[tuple[Objective, float], ...] = ()


def _rule_error(rule: str, msg: str) -> ConfigError:
    return ConfigError("select", f"rule {rule!r}: {msg}")


def _points(rule: str, s: str) -> float:
    try:
        x = float(s)
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or x < 0:
        raise _rule_error(rule, f"X must be a number >= 0, got {s!r}")
    return x


def _rule_objective(rule: str, name: str, direction: str) -> Objective:
    try:
        return Objective(name, direction)
    except ConfigError as exc:
        raise _rule_error(rule, exc.message) from None


def parse_selection_rule(rule: str) -> SelectionRule:
    """Parse an export selection rule; ConfigError (field ``select``) names the bad part.

    Grammar (metric names as logged, docs/contract.md)::

        RULE       := SHORTHAND | GOAL ("," CONSTRAINT)*
        GOAL       := ("max" | "min") ":" METRIC
        CONSTRAINT := "within" ":" [("max" | "min") ":"] METRIC ":" X        (X >= 0)
        SHORTHAND  := "pgd4-within-clean" [":" X]   (= max:acc_pgd_4,within:acc_clean:X; X=1.0)

    Meaning: the candidates are the front-1 runs. Each CONSTRAINT keeps those whose METRIC is
    within X of the best METRIC among all front-1 runs (best = highest; lowest with ``min``;
    1e-9 slack for round-off). The GOAL then picks the best candidate; ties go to the higher
    acc_aa_2, then the lower lip_jacobian_median, then the smaller run_id (:data:`TIE_BREAK`).
    Examples: ``max:acc_pgd_4``, ``min:lip_jacobian_median``, ``pgd4-within-clean:2``,
    ``max:acc_aa_2,within:acc_clean:0.5,within:min:lip_jacobian_median:1``.
    """
    if not isinstance(rule, str) or not rule.strip():
        raise ConfigError("select", f"rule must be a non-empty string, got {rule!r}")
    text = rule.strip()
    head, _, arg = text.partition(":")
    if head in SHORTHANDS:
        template, default = SHORTHANDS[head]
        x = _points(rule, arg) if arg else default
        full = parse_selection_rule(template.format(x=x))
        return SelectionRule(text, full.goal, full.within)
    parts = [p.strip() for p in text.split(",")]
    goal = [g.strip() for g in parts[0].split(":")]
    if len(goal) != 2 or goal[0].lower() not in DIRECTIONS:
        raise _rule_error(
            rule,
            f"goal {parts[0]!r} must be 'max:METRIC' or 'min:METRIC' "
            f"(or a named rule: {', '.join(sorted(SHORTHANDS))})",
        )
    within = []
    for c in parts[1:]:
        f = [x.strip() for x in c.split(":")]
        if f[0] != "within" or len(f) not in (3, 4) or (len(f) == 4 and f[1] not in DIRECTIONS):
            raise _rule_error(
                rule, f"constraint {c!r} must be 'within:METRIC:X' or 'within:min:METRIC:X'"
            )
        direction = f[1] if len(f) == 4 else "max"
        within.append((_rule_objective(rule, f[-2], direction), _points(rule, f[-1])))
    return SelectionRule(text, _rule_objective(rule, goal[1], goal[0].lower()), tuple(within))


@dataclass(frozen=True)
class Selection:
    """The run chosen for export, and why."""

    run_id: str
    index: int
    """Position of the run in the records given."""
    rule: str
    explanation: str
    arm: str | None = None
    """The chosen arm's name when the choice was over arms (None over runs)."""

    def as_dict(self) -> dict[str, Any]:
        out = {"rule": self.rule, "run_id": self.run_id, "explanation": self.explanation}
        return out if self.arm is None else {**out, "arm": self.arm}


def select_from_front(
    records: Sequence[Mapping[str, Any] | Trial],
    ranks: Sequence[int] | np.ndarray,
    rule: str | SelectionRule = DEFAULT_SELECT_RULE,
) -> Selection:
    """Choose the run to export among the front-1 runs by ``rule`` (:func:`parse_selection_rule`).

    Deterministic and independent of the order of ``records``. Raises ConfigError for a bad
    rule and ValueError when no front run qualifies (empty front, metric missing everywhere,
    constraints that exclude every run).
    """
    sel = rule if isinstance(rule, SelectionRule) else parse_selection_rule(rule)
    trials = as_trials(records)
    r = check_ranks(ranks, len(trials))
    front = [i for i in range(len(trials)) if r[i] == 1]
    if not front:
        raise ValueError(f"select rule {sel.text!r}: no run has rank 1 (nothing ranked)")
    cands, notes = front, []
    for ref, x in sel.within:
        vals = {i: metric_value(trials[i], ref.name) for i in front}
        known = [v for v in vals.values() if v is not None]
        if not known:
            raise ValueError(f"select rule {sel.text!r}: no front run has a finite {ref.name!r}")
        s = 1.0 if ref.direction == "max" else -1.0
        best = s * max(s * v for v in known)
        lim = best - s * x
        notes.append(
            f"{ref.name} {'>=' if s > 0 else '<='} {lim:.4g} (best {best:.4g} "
            f"{'-' if s > 0 else '+'} {x:g})"
        )
        cands = [i for i in cands if vals[i] is not None and s * (vals[i] - lim) >= -1e-9]
    if not cands:
        raise ValueError(f"select rule {sel.text!r}: no front run meets all of {'; '.join(notes)}")
    scored = [i for i in cands if metric_value(trials[i], sel.goal.name) is not None]
    if not scored:
        raise ValueError(
            f"select rule {sel.text!r}: no candidate front run has a finite {sel.goal.name!r}"
        )

    def key(i: int) -> tuple:
        ks = []
        for o in (sel.goal,) + TIE_BREAK:
            v = metric_value(trials[i], o.name)
            ks.append(math.inf if v is None else (-v if o.direction == "max" else v))
        return (*ks, trials[i].run_id)

    win = min(scored, key=key)
    word = "highest" if sel.goal.direction == "max" else "lowest"
    shown = fmt_value(sel.goal.name, metric_value(trials[win], sel.goal.name))
    why = f"{word} {sel.goal.name} ({shown}) among {len(scored)} of {len(front)} front runs" + (
        f" with {', '.join(notes)}" if notes else ""
    )
    return Selection(trials[win].run_id, win, sel.text, why)


def select_from_arm_front(
    records: Sequence[Mapping[str, Any] | Trial],
    arms: Sequence["Arm"],
    ranks: Sequence[int] | np.ndarray,
    rule: str | SelectionRule = DEFAULT_SELECT_RULE,
) -> Selection:
    """Choose an arm among the front-1 ``arms`` (``ranks``: their ranks) by ``rule`` on the
    arms' mean metrics, then its run closest to the arm's mean on the rule's goal metric
    (ties: smaller seed, then run_id). ``records`` are the runs the arms were grouped from;
    the Selection's ``index`` is the chosen run's position there. Errors as
    :func:`select_from_front`."""
    from lipsweep.decide.arms import arm_records

    sel = rule if isinstance(rule, SelectionRule) else parse_selection_rule(rule)
    names = {sel.goal.name} | {o.name for o, _ in sel.within} | {o.name for o in TIE_BREAK}
    pick = select_from_front(arm_records(arms, sorted(names)), ranks, sel)
    arm = arms[pick.index]
    goal = sel.goal.name
    mean = float(np.mean(list(arm.values(goal).values())))
    used = {t.run_id for t in arm.used_runs}  # a seed's second run is in no statistic
    runs = [
        (i, t)
        for i, t in enumerate(arm.runs)
        if t.run_id in used and metric_value(t, goal) is not None
    ]
    i, run = min(runs, key=lambda it: (abs(metric_value(it[1], goal) - mean), it[0]))
    index = next(j for j, t in enumerate(as_trials(records)) if t.run_id == run.run_id)
    how = pick.explanation.replace("front runs", "front arms")
    why = (
        f"arm {arm.name!r} (n={arm.n}): {how}"
        f"; its run closest to the arm's mean {goal} ({fmt_value(goal, mean)}), seed "
        f"{arm.seeds[i]}"
    )
    return Selection(run.run_id, index, sel.text, why, arm=arm.name)
