"""Behaviours that once changed with the whole suite green, each pinned here.

Each test names the change it catches; each was seen to fail with that change applied. Real
MLflow (SQLite in a temp dir) where a run is read; Tune's trial objects are stood in for by
plain objects carrying the three attributes the console callback reads.
"""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from _sweep_helpers import empty_store
from safetensors.torch import save as save_bytes

from lipsweep.decide.arms import baseline_arm, group_arms
from lipsweep.tracking import FAILED, FINISHED, TAG_FAILURE, Tracker, TrackingReader

BASE = {"regularizer": "none", "lr": "0.001", "epochs": "1"}
JAS = {"regularizer": "jasmin", "k": "10", "lam": "0.01", "aggregation": "mean", "lr": "0.001"}


def _recs(rows: list[tuple[dict, int, dict]]) -> list[dict]:
    return [
        {"run_id": f"r{i}", "params": {**p, "seed": s}, "metrics": m}
        for i, (p, s, m) in enumerate(rows)
    ]


def test_baseline_is_the_unregularized_arm_with_the_most_runs():
    """Catches: ``baseline_arm`` taking the baseline arm with the fewest runs. The arm with
    fewer runs also sorts first by name, so neither order by name alone passes."""
    rows = [({**BASE, "lr": "0.0001"}, 0, {"acc_clean": 1.0})]  # 'baseline (lr=0.0001)'
    rows += [(BASE, s, {"acc_clean": 2.0}) for s in (0, 1, 2)]  # 'baseline (lr=0.001)'
    rows += [(JAS, s, {"acc_clean": 3.0}) for s in (0, 1, 2, 3)]  # most runs, not a baseline
    arms = group_arms(_recs(rows))
    base = baseline_arm(arms)
    assert base.params["lr"] == "0.001" and base.seeds == [0, 1, 2]
    few = next(a for a in arms if len(a.runs) == 1)
    assert few.name < base.name  # so the name tie-break alone would pick `few`


def test_paired_table_counts_the_seeds_shared_with_the_baseline():
    """Catches: the 'pairs' column counting the arm's seeds (3) instead of the seeds it
    shares with the baseline (2)."""
    from lipsweep.decide.report import paired_markdown

    rows = [(BASE, s, {"acc_clean": 30.0 + s}) for s in (0, 1)]
    rows += [(JAS, s, {"acc_clean": 31.0 + 2 * s}) for s in (0, 1, 2)]
    base, jas = group_arms(_recs(rows))
    table = paired_markdown([base, jas], base)
    # seeds 0, 1: d = (1, 2), mean 1.5; seed 2 has no baseline and pairs with nothing
    row = next(line for line in table.splitlines() if line.startswith(f"| {jas.name} |"))
    assert row.split("|")[2].strip() == "2", table
    assert "+1.50" in row


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[str, Tracker, str]:
    """A real SQLite MLflow store with one sweep: a parent and three trial runs (t0 finished,
    t1 failed, t2 finished and confirmed at a reduced budget)."""
    uri = empty_store(tmp_path_factory.mktemp("pins") / "mlflow.db")
    tracker = Tracker(uri, "pins")
    parent = tracker.open_parent("/nonexistent/ray", "pins", {"space": "test"})
    for tid, status in (("t0", FINISHED), ("t1", FAILED), ("t2", FINISHED)):
        rid = tracker.open_child(parent, tid, f"{tid} [none seed=0]", {"regularizer": "none"})
        if status == FAILED:
            tracker.set_tags(rid, {TAG_FAILURE: "loss is nan at epoch 1"})
        else:
            tracker.log_metrics(rid, {"acc_clean": 20.0}, step=0)
        if tid == "t2":
            from lipsweep.decide.confirm import TAG_REQUEST, confirm_metric, request_key

            tracker.log_metrics(rid, {confirm_metric(2): 12.0}, step=0)
            tracker.set_tags(rid, {TAG_REQUEST: request_key(64, 2)})
        tracker.end(rid, status)
    return uri, tracker, parent


def test_confirm_at_reduced_budget_does_not_block_the_standard_one(store):
    """Catches: ``is_confirmed`` ignoring the ``aa_std.request`` tag, so a run confirmed with
    the test-only budget (or on fewer images) is skipped by the standard confirm."""
    from lipsweep.decide.confirm import is_confirmed, request_key

    uri, tracker, parent = store
    run = next(r for r in tracker.children(parent) if r.info.run_name.startswith("t2"))
    run = TrackingReader(uri, "pins").get_run(run.info.run_id)
    assert is_confirmed(run, [2], request_key(64, 2))  # the same request: skipped
    assert not is_confirmed(run, [2], request_key(64, None))  # standard budget: redone
    assert not is_confirmed(run, [2], request_key(0, 2))  # the whole split: redone
    assert not is_confirmed(run, [2, 8], request_key(64, 2))  # an eps it lacks: redone


def test_resumed_sweep_counts_an_errored_trial_as_failed(store):
    """Catches: on ``--resume``, a trial that ended in ERROR before the restart counted as
    finished, in the status block (Tune's trial states) and in the summary (MLflow's)."""
    from lipsweep.sweep.callbacks import ConsoleProgress, summarize
    from lipsweep.sweep.driver import _backfill_outcomes

    out = io.StringIO()
    cb = ConsoleProgress(3, status_every=0, stream=out)
    trials = [
        SimpleNamespace(trial_id=t, config={"regularizer": "none", "seed": 0}, status=s)
        for t, s in (("t0", "TERMINATED"), ("t1", "ERROR"), ("t2", "PENDING"))
    ]
    cb.on_step_end(0, trials)
    cb.show_status()
    assert out.getvalue().startswith("status: running 0 · pending 1 · finished 1 · failed 1 ·")

    _, tracker, parent = store
    outcomes = SimpleNamespace(outcomes={})
    _backfill_outcomes(outcomes, tracker, parent)
    assert {t: o.status for t, o in outcomes.outcomes.items()} == {
        "t0": FINISHED,
        "t1": FAILED,
        "t2": FINISHED,
    }
    ok, text = summarize(outcomes.outcomes, 3)
    assert not ok and text.startswith("2 finished, 0 stopped early, 1 failed, 0 not run")
    assert "FAILED t1 [t1 [none seed=0]]: loss is nan at epoch 1" in text


@pytest.mark.parametrize(
    "name", ["model.safetensors", "optimizer.safetensors", "regularizer.safetensors"]
)
def test_every_checkpoint_weights_file_is_verified_on_load(tmp_path, name):
    """Catches: a weights file (``regularizer.safetensors`` was the one) loaded without its
    checksum being checked. The replacement is a valid safetensors file, so only the checksum
    can tell."""
    import torch

    from lipsweep.trial.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

    opt = {"state": {}, "param_groups": [{"lr": 0.1, "params": [0]}]}
    path = save_checkpoint(
        tmp_path, 1, {"w": torch.zeros(3)}, opt, {"u": torch.arange(3.0)}, {"history": []}
    )
    load_checkpoint(path)  # intact: loads
    (path / name).write_bytes(save_bytes({"u": torch.arange(3.0) + 1}))
    with pytest.raises(CheckpointError, match=f"{name} does not match its checksum"):
        load_checkpoint(path)
