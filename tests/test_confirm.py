"""``lipsweep confirm`` on real MLflow (SQLite), a real tiny timm ViT trained
by ``run_trial`` and real pyautoattack, with the test-only reduced budget
(``LIPSWEEP_CONFIRM_ITERS``): it logs ``acc_aa_std_2`` with tags saying the attack, a
confirm that failed half-way resumes without redoing the finished run, and one interrupted
within a run resumes after the chunks it finished."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest
import torch
from _sweep_helpers import empty_store

from lipsweep.__main__ import main
from lipsweep.settings.config import TrialConfig
from lipsweep.tracking import FINISHED, Tracker, TrackingReader

FLAT = {
    "model": "vit_tiny_patch16_224",
    "depth": 2,
    "embed_dim": 64,
    "num_heads": 4,
    "dataset": "embedded",
    "train_size": 512,
    "eval_size": 32,
    "batch_size": 64,
    "optimizer": "adamw",
    "lr": 2e-3,
    "epochs": 1,
    "evaluate": False,
    "device": "cpu",
}
# two runs that do not dominate each other: both on the front
FINAL = [
    {"acc_clean": 30.0, "acc_pgd_4": 5.0, "acc_aa_2": 1.0, "lip_jacobian_median": 2.0},
    {"acc_clean": 25.0, "acc_pgd_4": 8.0, "acc_aa_2": 2.0, "lip_jacobian_median": 3.0},
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A real final checkpoint folder (weights + config.json) as the trainable hands it to
    the driver, from the tiniest real trial."""
    from lipsweep.trial.run import run_trial

    d = tmp_path_factory.mktemp("trial")
    cfg = TrialConfig.from_flat(FLAT)
    result = run_trial(cfg, d, progress=False)
    final = d / "final"
    final.mkdir()
    (final / "model.safetensors").write_bytes(
        (result.checkpoint / "model.safetensors").read_bytes()
    )
    (final / "config.json").write_text(cfg.to_json())
    return final


def _sweep(tmp_path: Path, checkpoint: Path) -> tuple[str, list[str]]:
    """An experiment 'cf' with a parent run and two FINISHED child runs, logged the way the
    driver's MlflowSweepCallback logs them."""
    uri = empty_store(tmp_path / "mlflow.db")
    tracker = Tracker(uri, "cf")
    parent = tracker.open_parent(str(tmp_path / "ray"), "cf", {"space": "test"})
    ids = []
    for i, final in enumerate(FINAL):
        params = {**TrialConfig.from_flat({**FLAT, "seed": i}).to_flat()}
        rid = tracker.open_child(parent, f"t{i}", f"t{i}", params)
        tracker.log_metrics(rid, final, step=0)
        tracker.log_artifacts(rid, checkpoint, "checkpoint")
        tracker.end(rid, FINISHED)
        ids.append(rid)
    tracker.end(parent, FINISHED)
    return uri, ids


def _run(uri: str, rid: str):
    return TrackingReader(uri, "cf").get_run(rid)


@pytest.mark.slow
def test_confirm_one_run_logs_acc_aa_std_2(tmp_path, checkpoint, monkeypatch, capsys, caplog):
    from safetensors.torch import load_file

    from lipsweep.attacks._registry import AutoAttackSettings
    from lipsweep.attacks.autoattack import STANDARD_ATTACKS, AutoAttack
    from lipsweep.decide.confirm import load_images
    from lipsweep.vit.models import create_model

    monkeypatch.setenv("LIPSWEEP_CONFIRM_ITERS", "2")
    monkeypatch.setenv("LIPSWEEP_CONFIRM_STATE", str(tmp_path / "state"))
    uri, ids = _sweep(tmp_path, checkpoint)
    caplog.set_level(logging.INFO)
    rc = main(
        [
            "confirm",
            "--experiment",
            "cf",
            "--run-id",
            ids[0],
            "--images",
            "16",
            "--tracking-uri",
            uri,
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    # what it loaded (the test images only), then an estimate before any attack, then stages
    lines = [r.getMessage() for r in caplog.records]
    data = [line for line in lines if line.startswith("data ")]
    assert len(data) == 1 and data[0].endswith(": 16 eval images of 500 test images"), data
    first = next(i for i, line in enumerate(lines) if "estimated" in line)
    assert "AutoAttack custom on 16 images" in lines[first], lines[first]
    assert "for apgd-ce" in lines[first] and lines.index(data[0]) < first, lines[first]
    assert not any("acc_aa_std_2: " in line for line in lines[:first])  # no attack before
    assert any(", stage 1/4 apgd-ce: " in line for line in lines)
    run = _run(uri, ids[0])
    value = run.data.metrics["acc_aa_std_2"]
    tags = run.data.tags
    assert tags["aa_std.images"] == "16" and tags["aa_std.iters"] == "2"
    assert tags["aa_std.version"] == "custom"  # the reduced budget is never tagged standard
    assert tags["aa_std.attacks"] == ",".join(STANDARD_ATTACKS)
    assert "eps 2/255 on 16 images" in tags["attack.acc_aa_std_2"]
    assert "acc_aa_std_2" not in _run(uri, ids[1]).data.metrics
    # the same attack, run here on the checkpoint's weights (loaded the trial's way) and the
    # same 16 images
    x, y = load_images(FLAT, 16)
    assert x.shape[0] == 16
    model = create_model(TrialConfig.from_flat(FLAT).model)
    model.net.load_state_dict(load_file(str(checkpoint / "model.safetensors")))
    model.eval()
    res = AutoAttack(
        model, 2 / 255, AutoAttackSettings(aa_attacks=list(STANDARD_ATTACKS), aa_iters=2)
    ).run(x, y)
    assert value == pytest.approx(res.robust_accuracy)
    with torch.no_grad():
        clean = 100.0 * float((model(x).argmax(1) == y).float().mean())
    assert float(tags["aa_std.acc_clean"]) == pytest.approx(clean, abs=0.01)
    assert value <= clean
    assert "acc_aa_std_2(max)" in out and "confirmed 1 runs, skipped 0" in out
    # the run's chunks were saved as they ended, and removed once its result was logged
    assert (tmp_path / "state").is_dir() and not any((tmp_path / "state").iterdir())


@pytest.mark.slow
def test_confirm_resumes_without_redoing_finished_runs(
    tmp_path, checkpoint, monkeypatch, capsys, caplog
):
    monkeypatch.setenv("LIPSWEEP_CONFIRM_ITERS", "2")
    monkeypatch.setenv("LIPSWEEP_CONFIRM_STATE", str(tmp_path / "state"))
    uri, ids = _sweep(tmp_path, checkpoint)
    # the 2nd run's checkpoint goes missing: the confirm stops half-way through the front
    art = Path(_run(uri, ids[1]).info.artifact_uri.removeprefix("file://"))
    weights = art / "checkpoint" / "model.safetensors"
    os.rename(weights, weights.with_suffix(".away"))
    argv = ["confirm", "--experiment", "cf", "--images", "16", "--tracking-uri", uri]
    assert main(argv) == 1
    assert "acc_aa_std_2" in _run(uri, ids[0]).data.metrics
    assert "acc_aa_std_2" not in _run(uri, ids[1]).data.metrics
    first = _run(uri, ids[0]).data.metrics["acc_aa_std_2"]
    os.rename(weights.with_suffix(".away"), weights)
    capsys.readouterr()
    with caplog.at_level(logging.INFO, logger="lipsweep.confirm"):
        assert main(argv) == 0
    out = capsys.readouterr().out
    assert "confirmed 1 runs, skipped 1" in out
    assert any(
        f"run {ids[0][:8]}" in r.getMessage() and "skipped" in r.getMessage()
        for r in caplog.records
    )
    history = TrackingReader(uri, "cf").get_metric_history(ids[0], "acc_aa_std_2")
    assert [m.value for m in history] == [first]  # not redone
    assert "acc_aa_std_2" in _run(uri, ids[1]).data.metrics


def test_confirm_usage_errors_exit_2_naming_the_flag(tmp_path, capsys, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    for extra, flag in (
        (["--top", "0"], "--top"),
        (["--top", "1", "--run-id", "x"], "--top"),
        (["--images", "-1"], "--images"),
        (["--ray-address", "127.0.0.1:1"], "--ray-address"),  # nothing listens: refused fast
        ([], "--tracking-uri"),
    ):
        assert main(["confirm", "--experiment", "e", *extra, "--tracking-uri", uri]) == 2
        err = capsys.readouterr().err
        assert flag in err and err.count("\n") == 1, err
    # the deprecated --address works too, and says so
    assert (
        main(["confirm", "--experiment", "e", "--address", "127.0.0.1:1", "--tracking-uri", uri])
        == 2
    )
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "lipsweep: --address is deprecated; use --ray-address", err
    assert len(err) == 2 and "--ray-address 127.0.0.1:1" in err[1], err
    monkeypatch.setenv("LIPSWEEP_CONFIRM_ITERS", "lots")
    assert main(["confirm", "--experiment", "e", "--tracking-uri", uri]) == 2
    assert "LIPSWEEP_CONFIRM_ITERS" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()  # nothing created


def test_sweep_child_runs_get_tags_saying_which_autoattack_made_acc_aa():
    from lipsweep.sweep.callbacks import trial_attack_tags

    flat = TrialConfig.from_flat({**FLAT, "aa_eps": [2, 4]}).to_flat()
    tags = trial_attack_tags(flat, {"attack_images": 500, "acc_aa_2": 1.0})
    assert tags["aa.version"] == "custom" and tags["aa.iters"] == "10"
    assert tags["aa.square_queries"] == "10" and tags["aa.images"] == "500"
    assert tags["aa.attacks"] == "apgd-ce,apgd-t,fab-t,square"
    assert "eps 4/255 on 500 images" in tags["attack.acc_aa_4"]
    std = trial_attack_tags({**flat, "aa_version": "standard", "aa_iters": 100}, {})
    assert std["aa.version"] == "standard" and std["aa.square_queries"] == "5000"
    assert "aa.images" not in std
    assert trial_attack_tags({**flat, "attacks": ["pgd"]}, {}) == {}


def test_confirm_task_decides_its_device_like_a_trial(monkeypatch):
    """A Ray task given a GPU it cannot see fails at once with the reason (no silent days of
    standard AutoAttack on the CPU); one given none runs on the CPU."""
    import ray

    from lipsweep.sweep import ray_confirm as confirm
    from lipsweep.trial.device import DeviceError

    seen = {}
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # the task sets a worker's
    logger = logging.getLogger("lipsweep.confirm")  # and its logging: put back afterwards
    for attr in ("handlers", "propagate", "level"):
        monkeypatch.setattr(logger, attr, getattr(logger, attr))
    monkeypatch.setattr(confirm, "evaluate_standard", lambda *a, **k: seen.update(k))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [0])
    with pytest.raises(DeviceError, match=r"Ray assigned GPU\(s\) \['0'\], but CUDA is not"):
        confirm._evaluate_task({}, b"", [2], 16, None, label="run")
    assert seen == {}
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [])
    confirm._evaluate_task({}, b"", [2], 16, None, label="run")
    assert seen == {"device": "cpu", "label": "run"}


# three configurations on one front (none dominates another), first objective acc_clean (max)
RANKED = {
    "A": {"acc_clean": 30.0, "acc_pgd_4": 5.0, "acc_aa_2": 1.0, "lip_jacobian_median": 2.0},
    "B": {"acc_clean": 25.0, "acc_pgd_4": 8.0, "acc_aa_2": 2.0, "lip_jacobian_median": 3.0},
    "C": {"acc_clean": 20.0, "acc_pgd_4": 9.0, "acc_aa_2": 3.0, "lip_jacobian_median": 1.0},
}
LRS = {"A": "0.3", "B": "0.2", "C": "0.1"}  # id and lr orders are the reverse of acc_clean's


class _Runs:
    """The tracker ``confirm`` reads FINISHED trial runs from."""

    experiment = "e"

    def __init__(self, seeds):
        from types import SimpleNamespace as NS

        self.runs = [
            NS(
                info=NS(run_id=f"{'zyx'['ABC'.index(k)]}{s}", run_name=f"{k}{s}"),
                data=NS(metrics=dict(m), params={"lr": LRS[k], "seed": str(s)}),
            )
            for k, m in RANKED.items()
            for s in seeds
        ]

    def existing_experiment_id(self):
        return "1"

    def finished_trials(self, exp_id):
        return self.runs

    def sweep_parents(self, exp_id):
        return []


@pytest.mark.parametrize(
    "seeds,top,chosen",
    [
        ((0,), 2, ["z0", "y0"]),  # runs: acc_clean 30 then 25 (20 left out)
        ((0, 1), 1, ["z0", "z1"]),  # arms: every run of the arm with acc_clean 30
    ],
)
def test_confirm_top_takes_the_better_first_objective_first_on_a_tied_front(seeds, top, chosen):
    from lipsweep.decide.confirm import choose_runs

    assert choose_runs(_Runs(seeds), "e", None, top) == chosen


def test_confirm_at_reduced_budget_does_not_block_the_standard_one(three_trial_store):
    """Catches: ``is_confirmed`` ignoring the ``aa_std.request`` tag, so a run confirmed with
    the test-only budget (or on fewer images) is skipped by the standard confirm."""
    from lipsweep.decide.confirm import is_confirmed, request_key

    uri, tracker, parent = three_trial_store
    run = next(r for r in tracker.children(parent) if r.info.run_name.startswith("t2"))
    run = TrackingReader(uri, "pins").get_run(run.info.run_id)
    assert is_confirmed(run, [2], request_key(64, 2))  # the same request: skipped
    assert not is_confirmed(run, [2], request_key(64, None))  # standard budget: redone
    assert not is_confirmed(run, [2], request_key(0, 2))  # the whole split: redone
    assert not is_confirmed(run, [2, 8], request_key(64, 2))  # an eps it lacks: redone


def _objectives(clean: float, pgd: float) -> dict[str, float]:
    return {"acc_clean": clean, "acc_pgd_4": pgd, "acc_aa_2": 1.0, "lip_jacobian_median": 1.0}


def test_confirm_top_breaks_ties_in_a_rank_towards_the_better_first_objective(tmp_path):
    """``confirm --top 1`` with two runs (then two arms) on the front, neither dominating:
    the one with the better first objective (acc_clean, max) is confirmed, over runs and
    over arms alike."""
    from _sweep_helpers import finished_trials_store

    from lipsweep.decide.confirm import choose_runs
    from lipsweep.decide.sweep_runs import read_tracker

    def params(lr: str, seed: int) -> dict[str, str]:
        return {"regularizer": "none", "lr": lr, "seed": str(seed)}

    worse_first, better_first = _objectives(25.0, 8.0), _objectives(30.0, 5.0)
    runs = [(params("0.002", 0), worse_first), (params("0.001", 0), better_first)]
    uri, ids = finished_trials_store(tmp_path / "runs", runs)
    assert choose_runs(read_tracker(uri, "x"), "x", None, 1) == [ids[1]]
    arms = [(params(lr, s), m) for lr, m in runs for s in (0, 1)]
    uri, ids = finished_trials_store(tmp_path / "arms", arms)
    assert choose_runs(read_tracker(uri, "x"), "x", None, 1) == ids[2:]


# ------------------------------------------------------------------ resuming within a run

# A one-block timm ViT whose random weights (seed 8) get 3 of the 8 images right, one of them
# robust at 2/255: chunks of 5 images put a robust image in the first chunk and the other
# correct ones in the second.
RESUME_FLAT = {
    "model": "vit_tiny_patch16_224",
    "depth": 1,
    "embed_dim": 32,
    "num_heads": 2,
    "dataset": "embedded",
    "device": "cpu",
}
RESUME = {"images": 8, "iters": 1, "device": "cpu", "chunk": 5, "run_id": "r1", "label": "run r1"}


@pytest.fixture(scope="module")
def tiny_vit() -> tuple[dict, bytes]:
    """(flat config, safetensors bytes) of a seeded random one-block timm ViT."""
    import timm
    from safetensors.torch import save

    from lipsweep.vit.export_format import timm_spec

    flat = TrialConfig.from_flat(RESUME_FLAT).to_flat()
    spec = timm_spec(flat)
    with torch.random.fork_rng():
        torch.manual_seed(8)
        net = timm.create_model(spec["model_name"], pretrained=False, **spec["kwargs"])
    return flat, save(net.state_dict())


class _Attacks:
    """Counts the real AutoAttack calls (one per chunk) and, at call ``stop``, raises
    KeyboardInterrupt instead, as a Ctrl-C in the middle of the run does."""

    def __init__(self, monkeypatch, stop: int = 0) -> None:
        from lipsweep.attacks.autoattack import AutoAttack

        self.calls, real = 0, AutoAttack.run

        def run(attack, x, y, progress=False):
            self.calls += 1
            if self.calls == stop:
                raise KeyboardInterrupt
            return real(attack, x, y, progress)

        monkeypatch.setattr(AutoAttack, "run", run)


def _saved(root: Path) -> dict:
    import json

    return json.loads((root / "r1.json").read_text())["done"]


def test_an_interrupted_confirm_resumes_after_its_last_chunk(
    tiny_vit, tmp_path, monkeypatch, caplog
):
    """Ctrl-C during the second chunk, then a rerun: the first chunk is not attacked again
    and every image's outcome equals an uninterrupted run's."""
    from lipsweep.decide.confirm import evaluate_standard

    flat, weights = tiny_vit
    monkeypatch.setenv("LIPSWEEP_CONFIRM_STATE", str(tmp_path / "whole"))
    whole = evaluate_standard(flat, weights, [2], **RESUME)
    monkeypatch.setenv("LIPSWEEP_CONFIRM_STATE", str(tmp_path / "cut"))
    attacks = _Attacks(monkeypatch, stop=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate_standard(flat, weights, [2], **RESUME)
    assert len(_saved(tmp_path / "cut")["2"]) == 1
    attacks = _Attacks(monkeypatch)
    with caplog.at_level(logging.INFO, logger="lipsweep.confirm"):
        resumed = evaluate_standard(flat, weights, [2], **RESUME)
    lines = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("resuming confirm of run r1 from image 5 of 8") for m in lines), lines
    assert attacks.calls == 1  # the second chunk only
    assert _saved(tmp_path / "cut") == _saved(tmp_path / "whole")
    assert "1" in _saved(tmp_path / "whole")["2"][0]  # the first chunk's robust image is kept
    assert resumed.metrics == whole.metrics and whole.metrics["acc_aa_std_2"] > 0


def test_a_confirm_with_other_settings_starts_over(tiny_vit, tmp_path, monkeypatch, caplog):
    """A saved chunk of eps 2/255 is not reused at eps 3/255: one line says why, and every
    chunk is attacked."""
    from lipsweep.decide.confirm import evaluate_standard

    flat, weights = tiny_vit
    monkeypatch.setenv("LIPSWEEP_CONFIRM_STATE", str(tmp_path))
    _Attacks(monkeypatch, stop=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate_standard(flat, weights, [2], **RESUME)
    attacks = _Attacks(monkeypatch)
    with caplog.at_level(logging.INFO, logger="lipsweep.confirm"):
        evaluate_standard(flat, weights, [3], **RESUME)
    lines = [r.getMessage() for r in caplog.records]
    over = [m for m in lines if "starts over" in m]
    assert len(over) == 1 and "other settings (eps)" in over[0], lines
    assert not any("resuming" in m for m in lines)
    assert attacks.calls == 2
    assert list(_saved(tmp_path)) == ["3"]


def test_an_unreadable_confirm_state_starts_over(tmp_path, caplog):
    from lipsweep.decide.confirm_state import ConfirmState

    path = tmp_path / "r1.json"
    path.write_text('{"settings": {"eps": [2]}, "do')  # cut short
    with caplog.at_level(logging.INFO, logger="lipsweep.confirm"):
        state = ConfirmState.open(path, {"eps": [2]}, "run r1")
    assert state.images_done() == 0
    assert "run r1 starts over" in caplog.text and "unreadable" in caplog.text
