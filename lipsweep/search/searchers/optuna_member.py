"""The Optuna searchers as search-protocol members (:mod:`lipsweep.search.protocol`): a study
driven by ``ask`` and ``tell``, with no Ray (the replay benchmark drives them).

:class:`OptunaMember` tells a study what Tune's ``OptunaSearch`` (the live sweep's
:class:`~lipsweep.sweep.searchers._optuna.FinalResultOptuna`) tells it for the same final
results, through the same sampler and define-by-run space
(:mod:`lipsweep.search.searchers.optuna_sampling`), so both draw the same configurations.
Imports Optuna when a member is built.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Optional, Sequence

from lipsweep.search.protocol import CONTINUE, Repeats
from lipsweep.search.searchers._registry import SearchRequest
from lipsweep.search.searchers.optuna_sampling import (
    OptunaSpace,
    repeat_seeds,
    request_space,
    sampler_for,
)
from lipsweep.search.searchers.study import study_storage

_log = logging.getLogger(__name__)


class OptunaMember:
    """An Optuna study (its sampler, pruner and directions as Tune's ``OptunaSearch`` makes
    them) over an :class:`OptunaSpace`, as a member.

    :meth:`report` tells the final values of ``names`` as ``OptunaSearch.on_trial_complete``
    does: a trial with no result, or (one objective) no value, is told FAIL when it failed and
    PRUNED when it was stopped; values Optuna refuses (NaN, one of several objectives missing)
    are logged and the trial is left RUNNING, where Optuna's TPE (``constant_liar``) counts it
    among the worse trials of every later draw.
    """

    def __init__(self, study: Any, space: OptunaSpace, names: Sequence[str]) -> None:
        self.study = study
        self.space = space
        self.names = list(names)
        self.trials: dict[str, Any] = {}
        self.told: set[str] = set()

    def suggest(self, trial_id: str) -> Optional[dict[str, Any]]:
        if trial_id not in self.trials:
            self.trials[trial_id] = self.study.ask()
        return dict(self.space(self.trials[trial_id])["trial"])

    def report(
        self, trial_id: str, result: Optional[Mapping[str, Any]], failed: bool = False
    ) -> None:
        from optuna.trial import TrialState

        if trial_id in self.told or trial_id not in self.trials:
            _log.warning("trial %s was not asked or was told already: ignored", trial_id)
            return
        self.told.add(trial_id)
        values = [result.get(n) for n in self.names] if result else None
        state = TrialState.COMPLETE
        if values is None or (len(values) == 1 and values[0] is None):
            state, values = (TrialState.FAIL if failed else TrialState.PRUNED), None
        try:
            self.study.tell(self.trials[trial_id], values, state=state)
        except ValueError as err:  # NaN, a missing objective: Optuna refuses them
            _log.warning("trial %s left RUNNING: %s", trial_id, err)

    def decide(self, trial_id: str, group: str, t: float, metrics: Mapping[str, Any]) -> str:
        return CONTINUE


def optuna_member(settings: Any, request: SearchRequest) -> Any:
    """The member of Optuna searcher ``request.algorithm`` (its sampler) over ``request``: its
    study kept in ``request.study_db`` (in memory when None), each draw run once per seed of
    ``request.repeats`` when there are several (:class:`~lipsweep.search.protocol.Repeats`)."""
    import optuna

    study = optuna.create_study(
        storage=study_storage(request.study_db),
        sampler=sampler_for(request.algorithm, settings),
        pruner=optuna.pruners.NopPruner(),
        study_name=request.study_name,
        load_if_exists=True,
        directions=["minimize" if m == "min" else "maximize" for m in settings.mode],
    )
    member: Any = OptunaMember(study, request_space(request), settings.metric)
    seeds = repeat_seeds(request)
    return Repeats(member, seeds, settings.metric) if len(seeds) > 1 else member
