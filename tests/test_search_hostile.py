"""Hostile input to the scheduler settings, the spaces that configure them and
``bench-search``'s recorded tables: each is refused with one line (exit 2) before anything
starts; and the behaviours of the scheduler state, the replay's scoring and the Optuna
searcher's sampler that a mutation of the code would change. No Ray is started here."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from lipsweep.core.config_base import ConfigError
from lipsweep.search import replay
from lipsweep.search.space import load_space

OBJECTIVES = ["--objective", "acc_clean:max", "--objective", "acc_pgd_4:max"]


def _space(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def _dry_run(capsys, space: Path) -> tuple[int, str]:
    from lipsweep.__main__ import main

    rc = main(["sweep", str(space), "--dry-run"])
    return rc, capsys.readouterr().err


MO = "scheduler: {type: moasha, metrics: [acc_clean], modes: [max]}\n"
ASHA = "scheduler: {type: asha, metric: acc_clean, mode: max, grace_period: 6}\n"


# ---------------------------------------------------------------- spaces and their schedulers
@pytest.mark.parametrize(
    "body,field,words",
    [
        # epochs per trial: a rung at a short trial's last epoch would kill it
        ("grid: [{regularizer: none, epochs: [4, 8]}]\n" + MO, "scheduler", "different epochs"),
        (
            "search: {algorithm: random, num_samples: 4, space: {epochs: {choice: [4, 8]}}}\n"
            + MO,
            "scheduler",
            "different epochs",
        ),
        (
            "search: {algorithm: optuna-tpe, num_samples: 4, metric: acc_clean, mode: max, "
            "space: {epochs: {choice: [4, 8]}, lr: 0.001}}\n" + MO,
            "scheduler",
            "draws epochs",
        ),
        # a moasha that can never stop anything
        (
            "fixed: {epochs: 4, probe_every: 5}\ngrid: [{regularizer: none}]\n"
            "scheduler: {type: moasha, metrics: [probe_acc_pgd_4], modes: [max]}\n",
            "scheduler.metrics",
            "could never compare",
        ),
        (
            "fixed: {epochs: 4}\ngrid: [{regularizer: none}]\n"
            "scheduler: {type: moasha, metrics: [acc_clean], modes: [max], grace_period: 6}\n",
            "scheduler.grace_period",
            "could never stop",
        ),
        # asha's grace period above the epochs
        ("fixed: {epochs: 4}\ngrid: [{regularizer: none}]\n" + ASHA, "scheduler.grace_period",
         "could never stop"),
        (
            "fixed: {epochs: 4}\ngrid: [{regularizer: none}]\n"
            "scheduler: {type: asha, metric: acc_clean, grace_period: 6, max_t: 4}\n",
            "scheduler.max_t",
            "grace_period",
        ),
        # a max_t past the trials' epochs would put a rung at a trial's last epoch
        (
            "fixed: {epochs: 4}\ngrid: [{regularizer: none}]\n"
            "scheduler: {type: moasha, metrics: [acc_clean], modes: [max], max_t: 40}\n",
            "scheduler.max_t",
            "at most the trials' 4 epochs",
        ),
    ],
)  # fmt: skip
def test_a_scheduler_that_cannot_work_is_refused_by_the_dry_run(
    tmp_path, capsys, body, field, words
):
    space = _space(tmp_path, body)
    with pytest.raises(ConfigError) as exc:
        load_space(space)
    assert exc.value.field == field and words in exc.value.message, exc.value
    rc, err = _dry_run(capsys, space)
    assert rc == 2 and err.count("\n") == 1 and field in err, err


def test_every_trials_own_epochs_set_the_rungs_not_a_default_of_40(tmp_path):
    from lipsweep.sweep.driver import _scheduler

    space = _space(
        tmp_path, "grid: [{regularizer: none, epochs: 6}]\nrepeat: {seed: [0, 1]}\n" + MO
    )
    spec = load_space(space)
    assert spec.epochs == 6
    opts = SimpleNamespace(storage=str(tmp_path), experiment="e", resume=False)
    core = _scheduler(spec, opts).core
    assert core.max_t == 6 and core.rungs[-1] < 6


def test_the_scheduler_is_built_before_ray_or_mlflow_is_touched(tmp_path, monkeypatch):
    """A scheduler that fails to build fails the sweep before Ray starts or a run opens."""
    from lipsweep.search.schedulers import SCHEDULERS, register_scheduler, unregister_scheduler
    from lipsweep.search.schedulers.moasha import MoashaSettings
    from lipsweep.sweep import driver

    class Broken(MoashaSettings):
        type = "broken"

    @register_scheduler("broken", settings=Broken)
    def create(settings, ctx):
        raise ConfigError("scheduler.broken", "cannot be built")

    try:
        spec = load_space(_space(tmp_path, "fixed: {epochs: 4}\ngrid: [{regularizer: none}]\n"))
        spec.scheduler = Broken(metrics=("acc_clean",), modes=("max",))
        touched = []
        monkeypatch.setattr(driver, "_init_ray", lambda opts: touched.append("ray"))
        monkeypatch.setattr(driver, "Tracker", lambda *a, **k: touched.append("mlflow"))
        opts = SimpleNamespace(storage=str(tmp_path), experiment="e", resume=False)
        with pytest.raises(ConfigError, match="cannot be built"):
            driver.run_sweep(spec, opts, extra_callbacks=[])
        assert touched == []
    finally:
        unregister_scheduler("broken")
        assert "broken" not in SCHEDULERS.names()


# ---------------------------------------------------------------- bench-search's tables
HEADER = "config,seed,epoch,epoch_seconds,acc_clean,acc_pgd_4,probe_acc_pgd_4\n"
GOOD = [
    "a,0,1,1.0,0.5,,0.2", "a,0,2,1.0,0.6,0.3,0.3",
    "b,0,1,1.0,0.4,,0.1", "b,0,2,1.0,0.5,0.2,0.2",
]  # fmt: skip


def _table(tmp_path: Path, rows: list[str], raw: bytes = b"") -> Path:
    p = tmp_path / "t.csv"
    p.write_bytes(raw or (HEADER + "\n".join(rows) + "\n").encode())
    return p


def _bench(capsys, table: Path, out: Path, *extra: str) -> tuple[int, str]:
    from lipsweep.__main__ import main

    argv = ["bench-search", "--table", str(table), *OBJECTIVES, "--replays", "1"]
    rc = main([*argv, "--method", "grid", "--out", str(out), *extra])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    "rows,raw,words",
    [
        (GOOD[:1] + ["a,0,2,inf,0.6,0.3,0.3"] + GOOD[2:], b"", "epoch_seconds must be a positive"),
        (GOOD[:1] + ["a,0,2,,0.6,0.3,0.3"] + GOOD[2:], b"", "epoch_seconds must be a positive"),
        (GOOD[:1] + ["a,0,2,-3,0.6,0.3,0.3"] + GOOD[2:], b"", "epoch_seconds must be a positive"),
        (GOOD[:1] + ["a,0,2,nan,0.6,0.3,0.3"] + GOOD[2:], b"", "epoch_seconds must be a positive"),
        (GOOD + ["a,0,2,1.0,0.9,0.9,0.9"], b"", "a second row for a seed 0 epoch 2"),
        (GOOD[:1] + ["a,0,2,1.0,high,0.3,0.3"] + GOOD[2:], b"", "acc_clean is not a number"),
        (GOOD[:1] + ["a,0,2,1.0"] + GOOD[2:], b"", "4 fields, the header has 7"),
        ([], (HEADER + "a,0,1,1.0,0.5,,\xe9\n").encode("latin-1"), "not UTF-8"),
        ([], (HEADER + "a,0,1,1.0,0.5\x00,,0.1\n").encode(), "NUL byte"),
    ],
)  # fmt: skip
def test_a_hostile_table_is_refused_with_one_line_naming_its_line(
    tmp_path, capsys, rows, raw, words
):
    out = tmp_path / "out"
    rc, err = _bench(capsys, _table(tmp_path, rows, raw), out)
    assert rc == 2 and err.count("\n") == 1 and "--table" in err and words in err, err
    assert "t.csv:2:" in err or "t.csv:3:" in err or "t.csv:6:" in err, err
    assert not out.exists()


def test_a_huge_reduction_factor_is_one_line_in_the_cli_and_the_api(tmp_path, capsys):
    from lipsweep import api

    table = _table(tmp_path, GOOD)
    rc, err = _bench(capsys, table, tmp_path / "o", "--reduction-factor", "9" * 401)
    assert rc == 2 and err.count("\n") == 1 and "--reduction-factor" in err, err
    with pytest.raises(ConfigError) as exc:
        api.bench_search(
            table=str(table), objective=("acc_clean:max",), reduction_factor=10**400,
            out=str(tmp_path / "o"),
        )  # fmt: skip
    assert exc.value.field == "reduction_factor"


@pytest.mark.parametrize(
    "flag,extra",
    [
        ("--objective", ["--objective", "acc_clean:min"]),
        ("--stop-on", ["--stop-on", "acc_clean:max", "--stop-on", "acc_clean:max"]),
    ],
)
def test_a_metric_given_twice_names_the_flag_the_user_typed(tmp_path, capsys, flag, extra):
    from lipsweep import api

    rc, err = _bench(capsys, _table(tmp_path, GOOD), tmp_path / "o", *extra)
    assert rc == 2 and err.count("\n") == 1 and "scheduler" not in err, err
    assert f"{flag}: metric 'acc_clean' is given more than once" in err, err
    field = flag.removeprefix("--").replace("-", "_")
    twice = {"objective": ("acc_clean:max",), field: ("acc_clean:max",) * 2}
    with pytest.raises(ConfigError) as exc:
        api.bench_search(table=str(_table(tmp_path, GOOD)), out=str(tmp_path / "o"), **twice)
    assert exc.value.field == field and not (tmp_path / "o").exists()


@pytest.mark.parametrize("value,ok", [(1.5, False), (2, True), (2.5, True)])
@pytest.mark.parametrize("entry", ["asha", "moasha", "bench-search"])
def test_every_entry_point_takes_the_same_reduction_factors(tmp_path, capsys, entry, value, ok):
    """One rule (``search/schedulers/rules.py``): a real number >= 2."""
    from lipsweep.search.schedulers import scheduler_settings

    if entry == "bench-search":
        table, flag = _table(tmp_path, GOOD), ["--reduction-factor", str(value)]
        rc, err = _bench(capsys, table, tmp_path / "o", *flag)
        assert rc == (0 if ok else 2), err
        assert ok or "--reduction-factor: must be a number >= 2, got 1.5" in err, err
        return
    raw = {"type": entry, "reduction_factor": value}
    raw.update({"metrics": ["loss"], "modes": ["min"]} if entry == "moasha" else {})
    if ok:
        assert scheduler_settings(raw).reduction_factor == value
        return
    with pytest.raises(ConfigError) as exc:
        scheduler_settings(raw)
    assert exc.value.field == "scheduler.reduction_factor"
    assert "must be a number >= 2, got 1.5" in exc.value.message


@pytest.mark.parametrize("value", ["1.5", "0", "-0.2", "nan"])
def test_a_confidence_outside_0_1_is_one_line(tmp_path, capsys, value):
    rc, err = _bench(capsys, _table(tmp_path, GOOD), tmp_path / "o", "--confidence", value)
    assert rc == 2 and err.count("\n") == 1 and "--confidence" in err, err
    assert not (tmp_path / "o").exists()


def test_summary_json_is_strict_json_written_through_a_temporary(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    table = _table(tmp_path, GOOD)
    assert _bench(capsys, table, out)[0] == 0
    good = (out / "summary.json").read_text()
    json.loads(good, parse_constant=lambda c: pytest.fail(f"summary.json holds {c}"))
    from lipsweep.core import paths

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(paths.os, "fsync", full_disk)
    rc, err = _bench(capsys, table, out, "--replays", "2")
    assert rc == 1 and "summary.json" in err and err.count("\n") == 1, err
    assert (out / "summary.json").read_text() == good  # the previous file is whole
    assert sorted(p.name for p in out.iterdir()) == ["hypervolume.png", "summary.json"]
    with pytest.raises(ValueError):  # NaN is not JSON: refused, never written
        replay.write({"budget": 0.4, "x": float("nan")}, {}, out)
    assert (out / "summary.json").read_text() == good
