"""What a newcomer met, held: the docs say what the CLI does, every command the
README gives after setup runs with what ``make setup`` installed, and ``make clean`` removes
what the demo and the report write."""

from __future__ import annotations

import dataclasses
import io
import re
import subprocess
from pathlib import Path

from lipsweep.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _help(command: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if hasattr(a, "choices") and a.choices)
    return sub.choices[command].format_help()


def test_confirm_top_help_says_what_the_readme_says():
    """``--top N`` counts arms when pareto ranks arms (README, docs/contract.md); the help
    said 'the N best runs'."""
    text = " ".join(_help("confirm").split())
    assert "the N best by Pareto rank: arms (every run of each) when an arm has 2 or more" in text
    assert "`--top N`: the N best arms" in README


def test_report_header_with_one_seed_per_arm_reads_as_english(tmp_path):
    from lipsweep.decide.front import build_front
    from lipsweep.decide.report import write_front_report

    params = [{"regularizer": "none"}, {"regularizer": "jasmin", "k": "0", "lam": "0.01"}]
    recs = [
        {"run_id": f"r{i}", "params": {**p, "seed": 0}, "metrics": {"acc_clean": 20.0 + i}}
        for i, p in enumerate(params)
    ]
    front = build_front(recs, ["acc_clean:max"])
    md = write_front_report(front, {}, tmp_path, "e", "test").read_text()
    assert "at most 1 seeds" not in md and "2 arms (configs that differ only in seed; one" in md


def test_readme_commands_after_setup_need_no_uv_on_path():
    """``uv run ...`` exits 127 where uv is not on PATH (uv then lives in .tools/): the README
    runs the tools from .venv/bin, which ``make setup`` always creates."""
    assert not re.search(r"^\s*uv run ", README, re.M), "README runs `uv run` after setup"
    assert ".venv/bin/lipsweep --help" in README


def test_make_clean_removes_what_the_demo_and_the_report_write(tmp_path):
    """Starting over: the MLflow store, its lock and its Optuna study (whose study blocks a
    rerun of the same Optuna sweep), reports/, exports/ and what the README's examples write
    are cleaned, and git ignores them."""
    made = ["mlflow.db", "mlflow.db.lock", "reports/e/report.md", "exports/x/a", "ray_results/s/a"]
    made += ["mlflow.optuna.db", "nb-export/model.safetensors", "my100.npz", "runs/my100/a"]
    made += ["bench-search/summary.csv"]  # `lipsweep bench-search`'s default --out
    for name in made:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    (tmp_path / "Makefile").write_text((ROOT / "Makefile").read_text())
    keep = tmp_path / "configs" / "tiny.yaml"
    keep.parent.mkdir()
    keep.write_text("x")
    subprocess.run(["make", "-s", "clean"], cwd=tmp_path, check=True, timeout=60)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["Makefile", "configs/tiny.yaml"], left
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *made],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert ignored == made, ignored


def test_artifact_downloads_draw_no_progress_bars_into_a_log(tmp_path, capsys, monkeypatch):
    """MLflow's tqdm bars ('Downloading artifacts: 100%|...') went into logs from report and
    export (both download through TrackingReader); with stderr not a terminal they are off,
    as under `make` they always were."""
    import numpy as np
    from _sweep_helpers import empty_store

    from lipsweep.tracking import FINISHED, Tracker, TrackingReader

    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)
    monkeypatch.chdir(tmp_path)  # a SQLite store's artifacts go to ./mlruns (MLflow's default)
    uri = empty_store(tmp_path / "m.db")
    tracker = Tracker(uri, "e")
    parent = tracker.open_parent(str(tmp_path / "ray"), "e", {"space": "test"})
    lip = tmp_path / "lip"
    lip.mkdir()
    for name in ("a", "b"):
        np.savez(lip / f"{name}.npz", x=np.linspace(1.0, 2.0, 8))
    rid = tracker.open_child(parent, "t0", "t0", {"regularizer": "none", "seed": 0})
    tracker.log_artifacts(rid, lip, "lipschitz")
    tracker.end(rid, FINISHED)
    capsys.readouterr()
    got = TrackingReader(uri, "e").download_artifacts(rid, "lipschitz", tmp_path / "dl")
    err = capsys.readouterr().err
    assert sorted(p.name for p in Path(got).iterdir()) == ["a.npz", "b.npz"]
    assert "Downloading artifacts" not in err and "%|" not in err, err


def test_sweep_console_says_when_a_trial_starts_its_evaluation(caplog):
    """After the last epoch a trial evaluates for half a minute (the demo) to hours (ViT-B)
    with no event: the console says so when the last epoch's result arrives."""
    import logging
    from types import SimpleNamespace

    from lipsweep.settings.config import TrialConfig
    from lipsweep.sweep.callbacks import ConsoleProgress, evaluation_plan

    flat = TrialConfig.from_flat({"epochs": 2, "eval_size": 64}).to_flat()
    cb = ConsoleProgress(1, status_every=0, stream=io.StringIO())
    trial = SimpleNamespace(trial_id="t0", config={"trial": flat}, status="RUNNING")
    with caplog.at_level(logging.INFO, logger="lipsweep.sweep"):
        cb.on_trial_result(0, [trial], trial, {"epoch": 1, "loss": 2.0, "acc_clean": 20.0})
        assert "evaluating" not in caplog.text
        cb.on_trial_result(0, [trial], trial, {"epoch": 2, "loss": 1.9, "acc_clean": 21.0})
    assert (
        "t0 [none seed=0] evaluating: clean, FGSM, PGD, AutoAttack on 64 images; ||J_f|| on 64 "
        "images" in caplog.text
    )
    # each count is what that part measures: clean accuracy and the attacks on the first
    # attack_images of the evaluation images, ||J_f|| on the first lip_images (0: all)
    plan = evaluation_plan
    wide = {**flat, "eval_size": 0, "attack_images": 256, "lip_images": 0, "attacks": ["pgd"]}
    assert plan(wide) == "clean, PGD on up to 256 images; ||J_f|| on all test images"
    few = {**flat, "eval_size": 100, "attack_images": 0, "lip_images": 500, "attacks": []}
    assert plan(few) == "clean on 100 images; ||J_f|| on 100 images"
    no_eval = {**flat, "evaluate": False}
    caplog.clear()
    trial = SimpleNamespace(trial_id="t1", config={"trial": no_eval}, status="RUNNING")
    cb.on_trial_result(0, [trial], trial, {"epoch": 2, "loss": 1.9, "acc_clean": 21.0})
    assert "evaluating" not in caplog.text


def test_demo_names_the_mlflow_that_setup_installed(monkeypatch):
    """The demo's last lines said `mlflow ui ...`, which is not on the PATH after `make
    setup` (exit 127): it names this environment's own mlflow, as the README does."""
    from lipsweep.api._demo import installed_tool

    monkeypatch.chdir(ROOT)
    tool = installed_tool("mlflow")  # ROOT / an absolute path is that path
    assert tool != "mlflow" and (ROOT / tool).is_file(), tool
    assert ".venv/bin/mlflow ui --backend-store-uri" in README


def test_printed_paths_are_relative_to_the_working_folder_under_it(tmp_path, monkeypatch):
    from lipsweep.core.paths import shown_path

    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / "exports" / "smoke-best") == "exports/smoke-best"
    assert shown_path("reports/x") == "reports/x"
    assert shown_path("/elsewhere/x") == "/elsewhere/x"  # not under it: as given
    assert shown_path(tmp_path.parent / "y") == str(tmp_path.parent / "y")


def test_the_demo_says_where_to_look_relatively_and_when_its_resume_ran_nothing(
    tmp_path, monkeypatch, capsys
):
    """A second `make demo` resumed a finished sweep and printed `sweep: 67 s` and absolute
    paths; it says that nothing was left to run, and the paths as the README shows them."""
    from lipsweep import api
    from lipsweep.__main__ import main
    from lipsweep.api.results import DemoResult, ExportResult, OutcomeCounts, SweepResult
    from lipsweep.cli import commands

    monkeypatch.chdir(tmp_path)
    state = tmp_path / "ray_results" / "smoke"
    counts = OutcomeCounts(finished=4, stopped=0, failed=0, not_run=0, total=4)
    sweep = SweepResult("s.yaml", "smoke", "st", str(state), "sqlite:///mlflow.db", counts, ran=0)
    export = ExportResult(tmp_path / "exports" / "smoke-best", "r", "rule", {})
    done = DemoResult(sweep, object(), export, sweep_seconds=67.2)
    monkeypatch.setattr(api, "demo", lambda opts: done)
    for name in ("print_pareto", "print_export"):
        monkeypatch.setattr(commands, name, lambda result: None)
    monkeypatch.setattr(commands, "print_sweep", lambda result: 0)
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "sweep: nothing left to run, every trial had ended (67 s to check); Ray Tune " in out
    assert "state in ray_results/smoke\n" in out
    assert "export:     exports/smoke-best  (load with" in out
    done = DemoResult(dataclasses.replace(sweep, ran=4), object(), export, sweep_seconds=377)
    monkeypatch.setattr(api, "demo", lambda opts: done)
    assert main(["demo"]) == 0
    assert "sweep: 377 s; Ray Tune state in ray_results/smoke" in capsys.readouterr().out


def test_optuna_dashboard_comes_from_the_lock_not_the_system_pip(tmp_path):
    """The README's `pip install optuna-dashboard`, after activating .venv (which has no pip),
    installed into the system Python: `make optuna-dashboard` runs it from .venv, installed
    from the lock's `dashboard` extra."""
    import tomllib

    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    me = next(p for p in lock["package"] if p["name"] == "lipsweep")
    assert [d["name"] for d in me["optional-dependencies"]["dashboard"]] == ["optuna-dashboard"]
    assert "pip install optuna" not in README and "make optuna-dashboard" in README
    (tmp_path / "Makefile").write_text((ROOT / "Makefile").read_text())
    for name in ("pyproject.toml", "uv.lock", ".venv/.synced", "uv"):  # setup done: no install
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).touch()
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", "optuna-dashboard", f"UV={tmp_path / 'uv'}"]
        + ["OPTUNA_DB=study.optuna.db"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dry.returncode == 0, dry.stderr
    cmd = " ".join(dry.stdout.replace("\\\n", " ").split())
    assert "uv run --frozen --extra dashboard optuna-dashboard --host 127.0.0.1" in cmd
    assert cmd.endswith(f"sqlite:///{tmp_path / 'study.optuna.db'}"), cmd


def _python(code: str) -> subprocess.CompletedProcess:
    import os
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )


_URI = "postgresql://" + "u:secret@h/x"  # split: no file git commits holds a password URI


def test_the_api_shows_lipsweeps_info_lines_unless_logging_is_configured():
    """From Python, lipsweep's INFO lines (the Optuna study's path among them) were not shown:
    the API shows them as the CLI does, and leaves a configuration the user made alone."""
    call = (
        "from lipsweep import api; api.sweep(space='smoke', dry_run=True)\n"
        "log = logging.getLogger('lipsweep.sweep')\n"
        f"log.info('study in %s', {_URI!r}); log.debug('not shown')\n"
    )
    user = "logging.basicConfig(level=logging.INFO, format='U %(message)s')\n"
    fresh = _python("import logging\n" + call + user + call)
    assert fresh.returncode == 0, fresh.stderr
    lines = fresh.stderr.splitlines()
    assert len(lines) == 2, lines  # the second call: the user's handler alone, once
    shown = r"\d\d:\d\d:\d\d INFO lipsweep\.sweep: study in postgresql://\*\*\*@h/x"
    assert re.fullmatch(shown, lines[0]), lines[0]
    assert lines[1] == f"U study in {_URI}"  # their format, their filters
    theirs = _python(
        "import logging; logging.basicConfig(level=logging.WARNING, format='U %(message)s')\n"
        + call
        + "assert logging.getLogger('lipsweep').handlers == []\n"
        + "assert logging.getLogger('lipsweep').level == logging.NOTSET\n"
    )
    assert theirs.returncode == 0 and theirs.stderr == "", theirs.stderr
