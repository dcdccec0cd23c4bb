"""The front: a sweep's Pareto ranking (over runs or arms) and its export pick, built once.

:func:`build_front` is the one place that ranks. It ranks the runs
(:func:`lipsweep.decide.pareto.pareto_rank`: the non-dominated sort of NSGA-II, Deb et al.,
IEEE TEC 2002), groups them into arms (configs that differ only in seed,
:mod:`lipsweep.decide.arms`), takes every arm's statistics over its seeds (Student's
t-interval) and ranks the arms by their means; the front is over arms when an arm has two or
more seeds (and ``per_run`` is not set), over runs otherwise. Given a rule, it then picks the
run to export (:mod:`lipsweep.decide.selection`).

The :class:`Front` it returns is what everything that shows the front reads: the terminal
table, ``pareto.json``, the MLflow tags, the MLflow table, the figures
(:func:`lipsweep.decide.plots.front_scatter`), the report
(:func:`lipsweep.decide.report.write_front_report`), the export's ``selected_by`` and
:class:`lipsweep.api.ParetoResult`. None of them ranks again.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping, Sequence

import numpy as np

from lipsweep.decide.arms import (
    NO_STATS,
    Arm,
    Stats,
    arm_record,
    arm_table,
    group_arms,
    max_seeds,
    metric_interval,
)
from lipsweep.decide.pareto import (
    DEFAULT_OBJECTIVES,
    Objective,
    ParetoResult,
    Trial,
    format_front_table,
    front_doc,
    pareto_rank,
)
from lipsweep.decide.selection import (
    Selection,
    SelectionRule,
    parse_selection_rule,
    select_from_arm_front,
    select_from_front,
)


@dataclass(frozen=True, eq=False)
class Front:
    """A ranked sweep: its runs, its arms with their statistics, the ranks and the pick.
    Compared by identity (it holds arrays)."""

    runs: ParetoResult
    """The runs ranked on their own: trials (input order), objectives, values, ranks, and
    why each excluded run is not ranked."""
    arms: tuple[Arm, ...]
    arm_ranks: tuple[int, ...]
    """Each arm's rank from its means over seeds (always taken: every run is tagged with it)."""
    arm_stats: tuple[Mapping[str, Stats], ...]
    """Per arm, per metric some run logged: n, mean, std and 95% t-interval over its seeds."""
    by_arms: bool
    """The front is over arms (an arm has >= 2 seeds and ``per_run`` was not set)."""
    ranks: tuple[int, ...]
    """Per run (input order): its rank on this front, its own or, over arms, its arm's (0 when
    the run itself is not ranked)."""
    rule: str | None = None
    """The selection rule as given (None: nothing selected)."""
    selection: Selection | None = None
    no_selection: str = ""
    """Why the rule picked no run ("" when it picked one, or when there is no rule)."""

    @property
    def objectives(self) -> tuple[Objective, ...]:
        return self.runs.objectives

    @property
    def trials(self) -> tuple[Trial, ...]:
        return self.runs.trials

    @property
    def ranked_by(self) -> str:
        return "arms" if self.by_arms else "runs"

    @cached_property
    def arm_of(self) -> dict[str, int]:
        """run_id -> index of its arm."""
        return {t.run_id: i for i, a in enumerate(self.arms) for t in a.runs}

    def arm_stat(self, i: int, metric: str) -> Stats:
        return self.arm_stats[i].get(metric, NO_STATS)

    @property
    def selected_by(self) -> str:
        """The rule and why it chose the run, as the export's ``source.selected_by``."""
        if self.selection is None:
            raise ValueError(f"select rule {self.rule!r} picked no run: {self.no_selection}")
        return f"{self.rule} ({self.selection.explanation})"

    @cached_property
    def table(self) -> str:
        """The front for the terminal: the arms (mean [95% CI]) or the runs."""
        if self.by_arms:
            return arm_table(self.arms, self.arm_ranks, self.objectives, stats=self.arm_stats)
        r = np.asarray(self.ranks, dtype=np.int64)
        return format_front_table(
            self.trials, r, self.runs.values, self.runs.excluded, self.objectives
        )

    def as_json(self) -> dict[str, Any]:
        """``pareto.json``: :func:`lipsweep.decide.pareto.front_doc` of the runs at their
        ranks on this front, plus ``ranked_by`` and the arms with their statistics."""
        r = np.asarray(self.ranks, dtype=np.int64)
        doc = front_doc(
            self.trials, r, self.runs.values, self.runs.excluded, self.objectives, self.selection
        )
        doc["ranked_by"] = self.ranked_by
        doc["arms"] = self._arms_json()
        return doc

    def _arms_json(self) -> list[dict[str, Any]]:
        def num(x: float) -> float | None:
            return float(x) if x == x and abs(x) != float("inf") else None

        order = sorted(
            range(len(self.arms)),
            key=lambda i: (self.arm_ranks[i] == 0, self.arm_ranks[i], self.arms[i].arm_id),
        )
        out = []
        for i in order:
            a = self.arms[i]
            stats = {o.name: self.arm_stat(i, o.name) for o in self.objectives}
            out.append(
                {
                    "arm_id": a.arm_id,
                    "name": a.name,
                    "rank": self.arm_ranks[i],
                    "runs": [t.run_id for t in a.runs],
                    "seeds": [str(s) for s in a.seeds],
                    "stats": {
                        k: {
                            "n": s.n,
                            "mean": num(s.mean),
                            "std": num(s.std),
                            "ci95": [num(s.lo), num(s.hi)],
                        }
                        for k, s in stats.items()
                    },
                }
            )
        return out

    def run_tags(self) -> dict[str, dict[str, Any]]:
        """run_id -> its MLflow tags: ``pareto``, ``pareto_rank``, ``arm``, ``arm_id``,
        ``arm_rank``, ``arm_front`` (docs/contract.md)."""
        tags = {}
        for t, rank in zip(self.trials, self.ranks):
            i = self.arm_of[t.run_id]
            tags[t.run_id] = {
                "pareto": "true" if rank == 1 else "false",
                "pareto_rank": rank,
                "arm": self.arms[i].name,
                "arm_id": self.arms[i].arm_id,
                "arm_rank": self.arm_ranks[i],
                "arm_front": "true" if self.arm_ranks[i] == 1 else "false",
            }
        return tags

    def parent_tags(self) -> dict[str, Any]:
        """The sweep's parent run's tags: the front's size and what it ranks."""
        return {
            "pareto_front_size": sum(r == 1 for r in self.ranks),
            "pareto_ranked_by": self.ranked_by,
        }

    def records(self) -> list[dict[str, Any]]:
        """The runs as pareto records (module docstring of :mod:`lipsweep.decide.pareto`)."""
        return [
            {"run_id": t.run_id, "run_name": t.run_name, "metrics": t.metrics, "params": t.params}
            for t in self.trials
        ]

    def points(self) -> tuple[list[Any], list[int], str | None]:
        """What the figures draw: (records, their ranks, the selected point's run_id). Over
        arms, one record per arm at its means (run_id = arm_id)."""
        sel = self.selection
        if self.by_arms:
            recs = [arm_record(a, s) for a, s in zip(self.arms, self.arm_stats)]
            chosen = self.arms[self.arm_of[sel.run_id]].arm_id if sel else None
            return recs, list(self.arm_ranks), chosen
        return list(self.trials), list(self.ranks), sel.run_id if sel else None

    def members(self) -> list[tuple[str, str, tuple[str, ...], dict[str, float]]]:
        """The front's points, rank 1: (name, arm_id, run_ids, objective -> value); over arms
        the arm and its means, over runs the run (named by its run_name, else its id)."""
        names = [o.name for o in self.objectives]
        if self.by_arms:
            return [
                (
                    a.name,
                    a.arm_id,
                    tuple(t.run_id for t in a.runs),
                    {n: self.arm_stat(i, n).mean for n in names if self.arm_stat(i, n).n},
                )
                for i, (a, r) in enumerate(zip(self.arms, self.arm_ranks))
                if r == 1
            ]
        return [
            (
                t.run_name or t.run_id,
                self.arms[self.arm_of[t.run_id]].arm_id,
                (t.run_id,),
                {n: float(t.metrics[n]) for n in names if n in t.metrics},
            )
            for t, rank in zip(self.trials, self.ranks)
            if rank == 1
        ]


def _all_arm_stats(arms: Sequence[Arm], trials: Sequence[Trial]) -> tuple[dict[str, Stats], ...]:
    names = sorted({m for t in trials for m in t.metrics})
    return tuple({m: metric_interval(list(a.values(m).values()), m) for m in names} for a in arms)


def build_front(
    records: Sequence[Mapping[str, Any] | Trial],
    objectives: Sequence[Objective | str] = DEFAULT_OBJECTIVES,
    rule: str | SelectionRule | None = None,
    per_run: bool = False,
) -> Front:
    """Rank ``records`` over ``objectives``, over arms or runs, and pick by ``rule`` (module
    docstring). A rule that picks no run leaves ``selection`` None and says why in
    ``no_selection``; a malformed rule is a ConfigError."""
    runs = pareto_rank(records, objectives)
    arms = tuple(group_arms(runs.trials))
    stats = _all_arm_stats(arms, runs.trials)
    arm_recs = [arm_record(a, s) for a, s in zip(arms, stats)]
    arm_ranks = tuple(int(r) for r in pareto_rank(arm_recs, runs.objectives).ranks)
    by_arms = not per_run and max_seeds(arms) >= 2
    if by_arms:
        arm_of = {t.run_id: i for i, a in enumerate(arms) for t in a.runs}
        ranks = tuple(
            0 if t.run_id in runs.excluded else arm_ranks[arm_of[t.run_id]] for t in runs.trials
        )
    else:
        ranks = tuple(int(r) for r in runs.ranks)
    selection, why = None, ""
    if rule is not None:  # parsed first: a malformed rule is an error, not "no pick"
        parsed = rule if isinstance(rule, SelectionRule) else parse_selection_rule(rule)
        try:
            if by_arms:
                selection = select_from_arm_front(runs.trials, arms, arm_ranks, parsed)
            else:
                selection = select_from_front(runs.trials, ranks, parsed)
        except ValueError as err:
            why = str(err)
    shown = rule.text if isinstance(rule, SelectionRule) else rule
    return Front(runs, arms, arm_ranks, stats, by_arms, ranks, shown, selection, why)
