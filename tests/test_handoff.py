"""sweep/handoff: a --resume run's callbacks and scheduler are the ones Tuner.restore brings
back, through the public pickle protocol (no private Tune attributes)."""

from __future__ import annotations

import pickle

import ray.cloudpickle
from ray import tune

from lipsweep.sweep.handoff import Handoff, unbind_all


class _Cb(Handoff, tune.Callback):
    def __init__(self, seen: int) -> None:
        self.seen = seen


def test_restored_configs_hold_the_bound_objects_and_rebuild_when_none_is_bound():
    first = _Cb(seen=3)
    first.bind("/exp#mlflow")
    run = tune.RunConfig(name="exp", callbacks=[first, _Cb(seen=1)])  # the second is unbound
    blob = ray.cloudpickle.dumps(run)  # what Tune writes at the first start
    unbind_all("/exp#")

    now = _Cb(seen=0)  # the --resume run's own, bound before Tuner.restore
    now.bind("/exp#mlflow")
    try:
        restored = pickle.loads(blob)
        assert restored.callbacks[0] is now
        assert type(restored.callbacks[1]) is _Cb and restored.callbacks[1].seen == 1
    finally:
        unbind_all("/exp#")
    rebuilt = pickle.loads(blob).callbacks[0]  # nothing bound: the pickled state, as before
    assert rebuilt is not now and rebuilt.seen == 3
    unbind_all("/other#")  # another sweep's keys are not touched
