"""Tune searchers adapted to lipsweep's reports (imports Ray: load it lazily).

Both classes live at module level because Tune pickles the searcher into the experiment state
(``Tuner.restore`` needs it); a closure would not pickle.
"""

from __future__ import annotations

import logging
from typing import Any

from ray.tune.search.optuna import OptunaSearch

from lipsweep.core.config_base import ConfigError
from lipsweep.sweep.space import SearchSpace, normalise_trial, parse_space

_log = logging.getLogger(__name__)


class FinalResultOptuna(OptunaSearch):
    """Optuna that learns from each trial's final report only.

    A trial's per-epoch reports carry ``acc_clean`` and the losses; the docs/contract.md metrics an
    Optuna study optimises (``acc_pgd_4``, ``lip_jacobian_median``, ...) arrive once, in the
    final report, which ``on_trial_complete`` passes to ``study.tell``. Pruning on intermediate
    values is left to the scheduler (ASHA), so intermediate results are not forwarded.
    """

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        return None


class OptunaSpace:
    """Define-by-run space for Optuna over a ``search.space`` (see space.py).

    It draws through the same parsed :class:`~lipsweep.sweep.space.SearchSpace` as the random
    searcher (so both read the distribution syntax one way), and hands Tune the normalised flat
    config (:func:`~lipsweep.sweep.space.normalise_trial`): the MLflow params and
    ``config.json`` are then the same settings under either searcher.
    """

    def __init__(
        self, fixed: dict[str, Any], space: SearchSpace | dict[str, Any], path: str = "search.space"
    ) -> None:
        self.fixed = dict(fixed)
        self.space = space if isinstance(space, SearchSpace) else parse_space(space, path)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Tune's experiment state of a sweep started before the space was parsed holds the
        raw mapping: parse it on restore (``--resume``)."""
        self.__dict__.update(state)
        if not isinstance(self.space, SearchSpace):
            self.space = parse_space(self.space, "search.space")

    def __call__(self, trial: Any) -> dict[str, Any]:
        flat = {**self.fixed, **self.space.suggest(trial)}
        try:
            return {"trial": normalise_trial(flat)}
        except ConfigError as err:  # load_space checked 16 draws; this trial fails with it
            _log.warning("optuna drew an invalid trial: %s", err.format())
            return {"trial": flat}
