"""The searcher family (lipsweep/search/searchers; its Ray side in lipsweep/sweep/searchers):
registry, settings, Optuna's intermediate values and its persisted study (real Ray Tune
OptunaSearch, real Optuna on SQLite)."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from lipsweep.core.config_base import ConfigError
from lipsweep.search.searchers import (
    SearchRequest,
    create_searcher,
    list_searchers,
    searcher_entry,
    searcher_info,
)
from lipsweep.search.searchers.study import study_db, study_url
from lipsweep.search.space import load_space

pytestmark = pytest.mark.ray

BASE = "fixed: {epochs: 1}\n"
SPACE = "space: {lr: {loguniform: [1.0e-4, 1.0e-2]}, regularizer: {choice: [none, jasmin]}, "
SPACE += "jasmin: {lam: {loguniform: [1.0e-4, 1.0e-2]}}}"
OPTUNA = [n for n in list_searchers() if searcher_info(n).lazy]


def _space(tmp_path: Path, search: str) -> Path:
    p = tmp_path / "space.yaml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(BASE + f"search: {{{search}, {SPACE}}}\n")
    return p


def test_the_family_lists_grid_random_and_each_optuna_sampler():
    assert {"grid", "random", "optuna", "optuna-tpe", "optuna-nsga2"} <= set(list_searchers())
    assert {"optuna-nsga3", "optuna-gp", "optuna-tpe-multivariate"} <= set(OPTUNA)
    assert not searcher_info("grid").sampled and not searcher_info("random").lazy
    for name in OPTUNA:
        info = searcher_info(name)
        assert info.objectives and info.study and searcher_entry(name).settings is not None


@pytest.mark.parametrize(
    "search,field,text",
    [
        ("algorithm: hyperopt, num_samples: 2", "search.algorithm", "optuna-nsga2"),
        ("algorithm: [optuna], num_samples: 2", "search.algorithm", "known searchers"),
        ("algorithm: grid, num_samples: 2", "search.algorithm", "grid:"),
        (
            "algorithm: optuna-nsga2, num_samples: 2, population_size: 1",
            "search.population_size",
            "",
        ),
        (
            "algorithm: optuna-tpe, num_samples: 2, population_size: 4",
            "search.population_size",
            "unknown key",
        ),
        ("algorithm: optuna-gp, num_samples: 0", "search.num_samples", ""),
        (
            "algorithm: optuna-tpe, num_samples: 2, metric: [acc_clean], mode: [up]",
            "search.mode",
            "",
        ),
    ],
)
def test_bad_searcher_settings_name_the_key(tmp_path, search, field, text):
    path = _space(tmp_path, search)
    with pytest.raises(ConfigError) as exc:
        load_space(path)
    assert exc.value.field == field and exc.value.source == str(path)
    assert text in exc.value.message and "\n" not in str(exc.value)


def test_an_unknown_algorithm_exits_2_with_one_line(tmp_path):
    path = _space(tmp_path, "algorithm: hyperopt, num_samples: 2")
    proc = subprocess.run(
        [sys.executable, "-m", "lipsweep", "sweep", str(path), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    (line,) = [ln for ln in proc.stderr.splitlines() if "search.algorithm" in ln]
    assert "unknown searcher 'hyperopt'" in line and "optuna-tpe" in line


def test_loading_an_optuna_space_imports_no_ray_optuna_mlflow_or_torch(tmp_path):
    path = _space(tmp_path, "algorithm: optuna-nsga2, num_samples: 4, population_size: 4")
    code = (
        "import sys; from lipsweep.search.space import load_space\n"
        f"spec = load_space({str(path)!r})\n"
        "assert spec.search.settings.population_size == 4 and spec.search.lazy\n"
        "print(sorted(m for m in ('ray', 'optuna', 'mlflow', 'torch') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _plan(tmp_path: Path, name: str, metric: str, mode: str, db: Path | None = None):
    spec = load_space(
        _space(
            tmp_path, f"algorithm: {name}, num_samples: 3, seed: 1, metric: {metric}, mode: {mode}"
        )
    )
    request = SearchRequest(
        fixed=spec.fixed,
        space=spec.search.space,
        study_db=db or tmp_path / "mlflow.optuna.db",
        study_name="exp",
    )
    return create_searcher(name, spec.search.settings, request)


def _study(url: str):
    import optuna

    return optuna.load_study(study_name="exp", storage=url)


@pytest.mark.parametrize("name", OPTUNA)
@pytest.mark.parametrize(
    "metric,mode", [("acc_pgd_4", "max"), ("[acc_pgd_4, lip_jacobian_median]", "[max, min]")]
)
def test_each_optuna_searcher_keeps_its_study_in_sqlite(tmp_path, name, metric, mode):
    plan = _plan(tmp_path, name, metric, mode)
    assert plan.num_samples == 3 and plan.param_space is None
    assert plan.storage_url == study_url(tmp_path / "mlflow.optuna.db")
    searcher = plan.search_alg
    objectives = {"acc_pgd_4": 40.0, "lip_jacobian_median": 2.0, "lipsweep_final": 1}
    for i in range(2):
        config = searcher.suggest(f"t{i}")
        assert 1e-4 <= config["trial"]["lr"] <= 1e-2
        searcher.on_trial_complete(f"t{i}", {**objectives, "acc_pgd_4": 40.0 + i})
    study = _study(plan.storage_url)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    assert study.trials[1].values[0] == 41.0


@pytest.mark.parametrize("name", ["optuna", "optuna-nsga2"])
def test_one_repeat_seed_is_the_seed_every_optuna_draw_runs(tmp_path, name):
    """``repeat: {seed: [7]}`` under Optuna: each draw runs seed 7, as grid and random do."""
    spec = load_space(_space(tmp_path, f"algorithm: {name}, num_samples: 2, metric: acc_clean"))
    request = SearchRequest(
        fixed={**spec.fixed, "seed": 3},
        space=spec.search.space,
        study_db=tmp_path / "mlflow.optuna.db",
        repeats=[{"seed": 7}],
    )
    plan = create_searcher(name, spec.search.settings, request)
    assert plan.num_samples == 2
    assert [plan.search_alg.suggest(f"t{i}")["trial"]["seed"] for i in range(2)] == [7, 7]


def test_optuna_receives_the_per_epoch_values_and_the_final_metrics(tmp_path):
    """One objective: the per-epoch acc_clean goes to trial.report at each epoch; the final
    report is told, not reported. Several objectives: nothing is reported (Optuna forbids it),
    and the trial is still told."""
    searcher = _plan(tmp_path, "optuna-tpe", "acc_clean", "max").search_alg
    searcher.suggest("t0")
    for epoch, acc in ((1, 10.0), (2, 20.0)):
        searcher.on_trial_result("t0", {"acc_clean": acc, "loss": 2.0, "epoch": epoch})
    final = {"acc_clean": 25.0, "acc_pgd_4": 5.0, "epoch": 2, "lipsweep_final": 1}
    searcher.on_trial_result("t0", final)
    searcher.on_trial_complete("t0", final)
    (trial,) = _study(f"sqlite:///{tmp_path / 'mlflow.optuna.db'}").trials
    assert trial.intermediate_values == {1: 10.0, 2: 20.0} and trial.value == 25.0

    # a final-only objective is stood for by its per-epoch probe, when trials report one
    probe = _plan(tmp_path / "p", "optuna-tpe", "acc_pgd_4", "max").search_alg
    probe.suggest("t0")
    probe.on_trial_result("t0", {"acc_clean": 30.0, "probe_acc_pgd_4": 3.0, "epoch": 1})
    probe.on_trial_result("t0", {"acc_clean": 31.0, "epoch": 2})  # no probe: nothing sent
    (trial,) = probe._ot_study.trials
    assert trial.intermediate_values == {1: 3.0}

    multi = _plan(tmp_path / "m", "optuna-nsga2", "[acc_clean, acc_pgd_4]", "[max, max]")
    multi.search_alg.suggest("t0")
    multi.search_alg.on_trial_result("t0", {"acc_clean": 10.0, "epoch": 1})
    multi.search_alg.on_trial_complete("t0", final)
    (trial,) = _study(multi.storage_url).trials
    assert trial.intermediate_values == {} and trial.values == [25.0, 5.0]


def test_a_restored_searcher_continues_the_same_study(tmp_path):
    """Tune pickles the searcher into the experiment state and ``Tuner.restore`` unpickles it:
    the restored one writes to the same SQLite study (a trial left RUNNING by the interrupt
    is finished there, and new trials are numbered after the existing ones)."""
    searcher = _plan(tmp_path, "optuna", "acc_clean", "max").search_alg
    searcher.suggest("t0")
    searcher.on_trial_complete("t0", {"acc_clean": 10.0})
    searcher.suggest("t1")  # running when the sweep is interrupted
    searcher.on_trial_result("t1", {"acc_clean": 5.0, "epoch": 1})
    restored = pickle.loads(pickle.dumps(searcher))
    restored.on_trial_result("t1", {"acc_clean": 6.0, "epoch": 2})
    restored.on_trial_complete("t1", {"acc_clean": 12.0})
    restored.suggest("t2")
    restored.on_trial_complete("t2", {"acc_clean": 11.0})
    study = _study(f"sqlite:///{tmp_path / 'mlflow.optuna.db'}")
    assert [(t.number, t.state.name, t.value) for t in study.trials] == [
        (0, "COMPLETE", 10.0),
        (1, "COMPLETE", 12.0),
        (2, "COMPLETE", 11.0),
    ]
    assert study.trials[1].intermediate_values == {1: 5.0, 2: 6.0}


@pytest.mark.parametrize(
    "uri,storage,expected",
    [
        ("sqlite:///{t}/mlflow.db", "{t}/ray", "{t}/mlflow.optuna.db"),
        ("sqlite:///runs.db", "{t}/ray", "{cwd}/runs.optuna.db"),
        ("http://127.0.0.1:5000", "{t}/ray", "{t}/ray/exp/optuna.db"),
        ("databricks", "file://{t}/ray", "{t}/ray/exp/optuna.db"),
        ("https://mlflow.example", "s3://bucket/sweeps", "{cwd}/.exp-optuna.db"),
    ],
)
def test_the_study_lives_beside_the_mlflow_store_else_in_the_sweep_state(
    tmp_path, monkeypatch, uri, storage, expected
):
    monkeypatch.chdir(tmp_path)
    t, cwd = str(tmp_path.resolve()).lstrip("/"), str(tmp_path.resolve())
    uri = uri.format(t="/" + t)
    got = study_db(uri, storage.format(t="/" + t), "exp")
    assert got == Path(expected.format(t="/" + t, cwd=cwd))


def _complete_trials(db: Path) -> int:
    import sqlite3

    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return con.execute("select count(*) from trials where state = 'COMPLETE'").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:  # the study's tables are not there yet
        return 0


@pytest.mark.slow
def test_an_interrupted_optuna_sweep_resumes_the_same_persisted_study(tmp_path):
    """A real tiny sweep (Ray Tune, MLflow on SQLite): SIGINT once Optuna was told one trial,
    then ``--resume``. The study beside the MLflow store holds the trials of both parts, once
    each, with their per-epoch values, and MLflow has one child run per trial."""
    import signal

    from _sweep_helpers import FIXED, children, empty_store, sweep_cmd, wait_for

    space = tmp_path / "space.yaml"
    space.write_text(
        "name: t\n"
        + FIXED.format(epochs=2)
        + "  evaluate: false\n"  # the final report is acc_clean alone: what Optuna is told
        + "search:\n  algorithm: optuna-tpe\n  num_samples: 2\n  seed: 0\n  metric: acc_clean\n"
        "  space: {lr: {loguniform: [1.0e-4, 3.0e-3]}}\n"
        "resources: {cpu: 1, gpu: 0}\nmax_concurrent_trials: 1\n"
    )
    uri = empty_store(tmp_path / "mlflow.db")
    db = tmp_path / "mlflow.optuna.db"
    proc = subprocess.Popen(
        sweep_cmd(tmp_path, space),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: _complete_trials(db) >= 1, 600, "Optuna told one trial", proc)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out[-3000:]
    assert f"optuna-dashboard sqlite:///{db}" in out
    first = _study(study_url(db)).trials
    assert 1 <= len(first) <= 2
    proc2 = subprocess.run(
        sweep_cmd(tmp_path, space, "--resume"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc2.returncode == 0, proc2.stdout + proc2.stderr[-4000:]
    trials = _study(study_url(db)).trials
    assert [t.number for t in trials] == [0, 1]
    assert all(t.state.name == "COMPLETE" for t in trials)
    assert [t.params for t in trials[: len(first)]] == [t.params for t in first]
    steps = [sorted(t.intermediate_values) for t in trials]
    assert steps == [[1, 2], [1, 2]], (steps, (proc2.stdout + proc2.stderr)[-3000:])
    kids = children(uri)
    assert len(kids) == 2 and all(r.info.status == "FINISHED" for r in kids)
    assert sorted(float(r.data.params["lr"]) for r in kids) == sorted(
        t.params["lr"] for t in trials
    )


def test_a_new_sweep_does_not_adopt_an_earlier_study_of_its_name(tmp_path):
    """Without --resume, a study already named after the experiment exits 2 in one line
    before Ray starts (it would silently continue an unrelated search)."""
    import optuna

    db = tmp_path / "mlflow.optuna.db"
    optuna.create_study(study_name="exp", storage=study_url(db))
    path = _space(tmp_path, "algorithm: optuna-tpe, num_samples: 2, metric: acc_clean")
    proc = subprocess.run(
        [sys.executable, "-m", "lipsweep", "sweep", str(path), "--experiment", "exp"]
        + ["--storage", str(tmp_path / "ray"), "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if "already exists" in ln]
    assert "--experiment exp" in line and "optuna delete-study" in line and str(db) in line
    assert not (tmp_path / "ray" / "exp").exists()


class _Inner:
    """A Tune searcher that records what it is told."""

    metric, mode = "acc_clean", "max"

    def __init__(self) -> None:
        self.told: list[tuple] = []

    def suggest(self, trial_id):
        return {"trial": {"lr": 0.1}}

    def on_trial_result(self, trial_id, result):
        pass

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.told.append((trial_id, result, error))


def test_a_repeat_searcher_tells_the_mean_of_the_finished_seeds_not_a_stopped_seeds_epoch():
    """Tune completes a stopped trial with its last per-epoch result; only a final report
    (``lipsweep_final``) counts. By hand: (0.8 + 0.6) / 2 = 0.7 (with t1's epoch value 0.1,
    (0.8 + 0.1 + 0.6) / 3 = 0.5)."""
    from lipsweep.sweep.searchers._optuna import RepeatSearcher

    inner = _Inner()
    searcher = RepeatSearcher(inner, [0, 1, 2], ["acc_clean"])
    assert [searcher.suggest(f"t{i}")["trial"]["seed"] for i in range(3)] == [0, 1, 2]
    searcher.on_trial_complete("t0", {"acc_clean": 0.8, "lipsweep_final": 1})
    searcher.on_trial_complete("t1", {"acc_clean": 0.1, "epoch": 1})  # stopped at epoch 1
    searcher.on_trial_complete("t2", {"acc_clean": 0.6, "lipsweep_final": 1})
    assert inner.told == [("t0", {"acc_clean": pytest.approx(0.7)}, False)]
    # every seed stopped: the draw is told as pruned (no result), not as failed
    for i in range(3, 6):
        searcher.suggest(f"t{i}")
        searcher.on_trial_complete(f"t{i}", {"acc_clean": 0.9, "epoch": 2})
    assert inner.told[-1] == ("t3", None, False)


def test_optuna_with_several_objectives_samples_with_nsga2_and_tpe_for_one():
    import optuna

    from lipsweep.search.searchers import searcher_settings
    from lipsweep.search.searchers.optuna_sampling import sampler_for

    two = searcher_settings(
        "optuna", {"num_samples": 4, "metric": ["acc_clean", "acc_pgd_4"], "mode": ["max", "max"]}
    )
    one = searcher_settings("optuna", {"num_samples": 4, "metric": "acc_clean", "mode": "max"})
    assert isinstance(sampler_for("optuna", two), optuna.samplers.NSGAIISampler)
    assert isinstance(sampler_for("optuna", one), optuna.samplers.TPESampler)


def _drive(member, objectives: dict, trials: int = 14) -> list[dict]:
    """Ask ``trials`` configs one by one; tell each its made-up results: trial 3 failed,
    trial 6 stopped (no result), trial 8 NaN, trial 10 no objective, the others scored
    ``objectives[name](config)``."""
    drawn = []
    for i in range(trials):
        config = member.suggest(f"t{i}")
        drawn.append(config)
        if i in (3, 6):
            member.report(f"t{i}", None, failed=i == 3)
        elif i in (8, 10):
            member.report(f"t{i}", {n: float("nan") for n in objectives} if i == 8 else {})
        else:
            member.report(f"t{i}", {n: f(config) for n, f in objectives.items()})
    return drawn


@pytest.mark.parametrize(
    "name, metric, mode",
    [("optuna-tpe", "acc_clean", "max"), ("optuna-nsga2", "[acc_clean, acc_pgd_4]", "[max, min]")],
)
def test_the_ray_free_member_draws_what_tunes_optuna_search_draws(tmp_path, name, metric, mode):
    """The replay's Optuna member and the live sweep's Tune searcher (FinalResultOptuna),
    told the same results (a failed, a stopped, a NaN and an empty one among them), draw the
    same configs; the member with its directions flipped draws others (so the comparison can
    fail)."""
    import math

    from lipsweep.search.protocol import TuneSearcherMember
    from lipsweep.search.searchers import create_member, searcher_settings

    extra = ", population_size: 4" if name == "optuna-nsga2" else ""
    spec = load_space(
        _space(
            tmp_path, f"algorithm: {name}, num_samples: 14, metric: {metric}, mode: {mode}{extra}"
        )
    )
    request = SearchRequest(fixed=spec.fixed, space=spec.search.space)
    objectives = {
        "acc_clean": lambda c: -10 * math.log10(c["lr"]) + 3 * (c["regularizer"] == "jasmin"),
        "acc_pgd_4": lambda c: 100 * c["lr"],
    }
    objectives = {n: objectives[n] for n in spec.search.settings.metric}
    settings = spec.search.settings
    tune = _drive(
        TuneSearcherMember(create_searcher(name, settings, request).search_alg), objectives
    )
    member = _drive(create_member(name, settings, request), objectives)
    assert member == tune
    flip = {"max": "min", "min": "max"}
    flipped = searcher_settings(
        name,
        {
            "num_samples": 14,
            "metric": list(settings.metric),
            "mode": [flip[m] for m in settings.mode],
            **({"population_size": 4} if extra else {}),
        },
    )
    assert _drive(create_member(name, flipped, request), objectives) != tune


def test_the_ray_free_member_keeps_its_study_and_runs_every_repeat_seed(tmp_path):
    """``repeat: {seed: [0, 1]}`` and a study file, as the Tune plan takes them: each draw
    runs both seeds, and the SQLite study is told their mean, (20 + 30) / 2 = 25."""
    from lipsweep.search.searchers import create_member

    spec = load_space(_space(tmp_path, "algorithm: optuna-tpe, num_samples: 2, metric: acc_clean"))
    db = tmp_path / "mlflow.optuna.db"
    request = SearchRequest(
        fixed=spec.fixed,
        space=spec.search.space,
        study_db=db,
        study_name="exp",
        repeats=[{"seed": 0}, {"seed": 1}],
    )
    member = create_member("optuna-tpe", spec.search.settings, request)
    first, second = member.suggest("t0"), member.suggest("t1")
    assert (first["seed"], second["seed"]) == (0, 1)
    assert {**first, "seed": 1} == second
    member.report("t0", {"acc_clean": 20.0})
    member.report("t1", {"acc_clean": 30.0})
    (trial,) = _study(study_url(db)).trials
    assert trial.state.name == "COMPLETE" and trial.value == 25.0


@pytest.mark.parametrize("name", OPTUNA)
def test_each_optuna_searcher_plans_and_replays_with_its_own_sampler(tmp_path, name):
    """One plan factory and one member factory serve every Optuna searcher: each reads its
    sampler from the request's ``algorithm``, which ``create_searcher``/``create_member``
    fill in."""
    from lipsweep.search.searchers import create_member
    from lipsweep.search.searchers.optuna_sampling import sampler_for

    spec = load_space(_space(tmp_path, f"algorithm: {name}, num_samples: 2, metric: acc_clean"))
    request = SearchRequest(fixed=spec.fixed, space=spec.search.space)
    want = type(sampler_for(name, spec.search.settings))
    member = create_member(name, spec.search.settings, request)
    assert type(member.study.sampler) is want
    assert member.suggest("t0")["epochs"] == 1
    plan = create_searcher(name, spec.search.settings, request)
    assert type(plan.search_alg._sampler) is want
