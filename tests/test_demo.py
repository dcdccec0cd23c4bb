"""`lipsweep demo` (lipsweep.api._demo and its CLI printer): it names the tools that ``make
setup`` installed, and says where to look in paths relative to the working folder, and when a
resumed sweep had nothing left to run. The API call is stood in for: no sweep runs here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_demo_names_the_mlflow_that_setup_installed(monkeypatch):
    """`mlflow ui ...` alone is not on the PATH after `make setup` (exit 127): the demo's last
    lines name this environment's own mlflow, as the README does."""
    from lipsweep.api._demo import installed_tool

    monkeypatch.chdir(ROOT)
    tool = installed_tool("mlflow")  # ROOT / an absolute path is that path
    assert tool != "mlflow" and (ROOT / tool).is_file(), tool
    assert ".venv/bin/mlflow ui --backend-store-uri" in (ROOT / "README.md").read_text()


def test_the_demo_says_where_to_look_relatively_and_when_its_resume_ran_nothing(
    tmp_path, monkeypatch, capsys
):
    """A second `make demo` resumes a finished sweep: it says that nothing was left to run
    (not `sweep: 67 s`), and gives the paths as the README shows them, not absolute."""
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
