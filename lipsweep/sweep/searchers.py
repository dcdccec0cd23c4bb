"""Tune searchers adapted to lipsweep's reports (imports Ray: load it lazily).

Both classes live at module level because Tune pickles the searcher into the experiment state
(``Tuner.restore`` needs it); a closure would not pickle.
"""
from __future__ import annotations

from typing import Any

from ray.tune.search.optuna import OptunaSearch

from lipsweep.regularizers import list_regularizers


class FinalResultOptuna(OptunaSearch):
    """Optuna that learns from each trial's final report only.

    A trial's per-epoch reports carry ``acc_clean`` and the losses; the SPEC §3 metrics an
    Optuna study optimises (``acc_pgd_4``, ``lip_jacobian_median``, ...) arrive once, in the
    final report, which ``on_trial_complete`` passes to ``study.tell``. Pruning on intermediate
    values is left to the scheduler (ASHA), so intermediate results are not forwarded.
    """

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        return None


class OptunaSpace:
    """Define-by-run space for Optuna mirroring a ``search.space`` mapping (see space.py).

    Keys named after a regularizer hold that regularizer's settings and are suggested only when
    it is drawn, under the name ``<regularizer>.<key>`` so Optuna sees each branch separately.
    """

    def __init__(self, fixed: dict[str, Any], space: dict[str, Any]) -> None:
        self.fixed = dict(fixed)
        self.space = dict(space)

    @staticmethod
    def suggest(trial: Any, name: str, dist: Any) -> Any:
        if not isinstance(dist, dict) or len(dist) != 1:
            return dist  # a constant
        kind, args = next(iter(dist.items()))
        if kind == "choice":
            return trial.suggest_categorical(name, args)
        lo, hi = float(args[0]), float(args[1])
        if kind == "loguniform":
            return trial.suggest_float(name, lo, hi, log=True)
        if kind == "uniform":
            return trial.suggest_float(name, lo, hi)
        if kind == "randint":
            return trial.suggest_int(name, int(lo), int(hi) - 1)
        return trial.suggest_int(name, int(round(lo)), int(round(hi)))

    def __call__(self, trial: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, dist in self.space.items():
            if key not in list_regularizers():
                out[key] = self.suggest(trial, key, dist)
        branch = self.space.get(out.get("regularizer"))
        if isinstance(branch, dict):
            for key, dist in branch.items():
                out[key] = self.suggest(trial, f"{out['regularizer']}.{key}", dist)
        return {"trial": {**self.fixed, **out}}
