"""The Optuna searchers: one Tune ``OptunaSearch`` per sampler, with a persisted study
(imports Ray and Optuna: loaded by :func:`~lipsweep.search.searchers.create_searcher`). The
sampler each searcher name builds and the define-by-run space are Ray-free, in
:mod:`lipsweep.search.searchers.optuna_sampling`.

The classes live at module level because Tune pickles the searcher into the experiment state
(``Tuner.restore`` needs it); a closure would not pickle. The pickled study holds only its
storage URL (Optuna's ``RDBStorage`` drops its engine when pickled), so a restored searcher
writes to the same SQLite study.
"""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any, Optional

from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from lipsweep.core import metric_names
from lipsweep.search.protocol import Repeats, TuneSearcherMember
from lipsweep.search.searchers._registry import SearchRequest, TunePlan

# Tune's pickled experiment state (``--resume``) may name the space's class at this address
from lipsweep.search.searchers.optuna_sampling import OptunaSpace as OptunaSpace
from lipsweep.search.searchers.optuna_sampling import repeat_seeds, request_space, sampler_for
from lipsweep.search.searchers.study import study_storage, study_url
from lipsweep.sweep.trainable import ERROR_KEY, FINAL_KEY

_log = logging.getLogger(__name__)


def per_epoch_counterpart(objective: str) -> list[str]:
    """Per-epoch names that stand for ``objective`` before the final report, in preference
    order: the objective itself (``acc_clean``), then its probe (``probe_acc_pgd_4``)."""
    return [objective, metric_names.probe_metric(objective)]


class FinalResultOptuna(OptunaSearch):
    """Optuna told each trial's final report, and sent its per-epoch values.

    The docs/contract.md metrics an Optuna study optimises (``acc_pgd_4``,
    ``lip_jacobian_median``, ...) arrive once, in the final report, which
    ``on_trial_complete`` passes to ``study.tell``. Each per-epoch report carrying the
    objective's per-epoch counterpart (:func:`per_epoch_counterpart`: ``acc_clean`` itself,
    or a ``probe_*`` metric) goes to ``trial.report(value, epoch)``, so an Optuna pruner, the
    dashboard or an external scheduler can read the learning curves. A multi-objective study
    takes no intermediate values (Optuna forbids ``Trial.report`` there): they are skipped.
    """

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if result.get(FINAL_KEY) or ERROR_KEY in result:
            return None  # the final report is told on completion
        if isinstance(self.metric, list):
            _log.debug("multi-objective study: Optuna takes no intermediate values (%s)", trial_id)
            return None
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is None or trial_id in self._completed_trials:
            return None
        for name in per_epoch_counterpart(self.metric):
            value = result.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                step = int(result.get("epoch") or result.get("training_iteration") or 0)
                ot_trial.report(float(value), step)
                return None
        return None


class RepeatSearcher(Searcher):
    """A Tune ``Searcher`` running each configuration of ``inner`` (a Tune searcher) once per
    seed and telling it the seed-mean objectives once every seed ended
    (:class:`lipsweep.search.protocol.Repeats`): ``repeat: {seed: [...]}`` under a learning
    searcher, every draw judged as one configuration."""

    def __init__(self, inner: Any, seeds: list[Any], names: list[str]) -> None:
        super().__init__(metric=inner.metric, mode=inner.mode)
        self.inner = inner
        self.repeats = Repeats(TuneSearcherMember(inner), seeds, names)

    def set_search_properties(self, metric: Any, mode: Any, config: Any, **spec: Any) -> bool:
        return self.inner.set_search_properties(metric, mode, config, **spec)

    def suggest(self, trial_id: str) -> Optional[dict]:
        config = self.repeats.suggest(trial_id)
        if config is None:
            return Searcher.FINISHED if self.repeats.exhausted else None
        return {"trial": config}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if self.repeats.lead(trial_id) == trial_id:  # the lead's curve stands for the draw
            self.inner.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: Any = None, error: bool = False) -> None:
        final = result if result and result.get(FINAL_KEY) else None
        self.repeats.report(trial_id, final, failed=error)

    def save(self, checkpoint_path: str) -> None:
        """One JSON file: the seed bookkeeping, and the inner searcher's own checkpoint
        (Tune's format, restored by Tune's code) as base64."""
        inner_path = f"{checkpoint_path}.inner"
        self.inner.save(inner_path)
        try:
            inner = base64.b64encode(Path(inner_path).read_bytes()).decode("ascii")
        finally:
            Path(inner_path).unlink(missing_ok=True)
        state = {"repeats": self.repeats.state(), "inner": inner}
        Path(checkpoint_path).write_text(json.dumps(state, default=_json_scalar))

    def restore(self, checkpoint_path: str) -> None:
        state = json.loads(Path(checkpoint_path).read_text())
        inner_path = f"{checkpoint_path}.inner"
        Path(inner_path).write_bytes(base64.b64decode(state["inner"]))
        try:
            self.inner.restore(inner_path)
        finally:
            Path(inner_path).unlink(missing_ok=True)
        self.repeats.load_state(state["repeats"])


def _json_scalar(value: Any) -> Any:
    """numpy scalars as Python numbers; anything else is not state this searcher keeps."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def optuna_plan(settings: Any, request: SearchRequest) -> TunePlan:
    """The plan of Optuna searcher ``request.algorithm``: a :class:`FinalResultOptuna` with
    its sampler over ``request.space``, whose study (``study_name``) is kept in
    ``request.study_db`` (in memory when None)."""
    metric = list(settings.metric) if len(settings.metric) > 1 else settings.metric[0]
    mode = list(settings.mode) if len(settings.mode) > 1 else settings.mode[0]
    seeds = repeat_seeds(request)
    url = None if request.study_db is None else study_url(request.study_db)
    searcher = FinalResultOptuna(
        space=request_space(request),
        metric=metric,
        mode=mode,
        sampler=sampler_for(request.algorithm, settings),
        study_name=request.study_name,
        storage=study_storage(request.study_db),
    )
    if url is not None:
        _log.info(
            "Optuna study %r is kept in %s; watch it with: optuna-dashboard %s",
            request.study_name,
            request.study_db,
            url,
        )
    if len(seeds) > 1:  # every draw runs every seed, judged as one configuration
        names = list(settings.metric)
        searcher = RepeatSearcher(searcher, seeds, names)
    return TunePlan(
        search_alg=searcher,
        num_samples=settings.num_samples * max(1, len(seeds)),
        storage_url=url,
    )
