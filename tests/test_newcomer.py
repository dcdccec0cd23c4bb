"""What a newcomer met (issue 32 §10), held: the docs say what the CLI does, every command the
README gives after setup runs with what ``make setup`` installed, and ``make clean`` removes
what the demo and the report write."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from lipsweep.__main__ import build_parser

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
    from lipsweep.decide.arms import group_arms
    from lipsweep.decide.pareto import DEFAULT_OBJECTIVES
    from lipsweep.decide.report import write_report

    params = [{"regularizer": "none"}, {"regularizer": "jasmin", "k": "0", "lam": "0.01"}]
    recs = [
        {"run_id": f"r{i}", "params": {**p, "seed": 0}, "metrics": {"acc_clean": 20.0 + i}}
        for i, p in enumerate(params)
    ]
    arms = group_arms(recs)
    md = write_report(
        recs, arms, [1, 1], [1, 1], DEFAULT_OBJECTIVES, False, {}, tmp_path, "e", "test"
    ).read_text()
    assert "at most 1 seeds" not in md and "2 arms (configs that differ only in seed; one" in md


def test_readme_commands_after_setup_need_no_uv_on_path():
    """``uv run ...`` exits 127 where uv is not on PATH (uv then lives in .tools/): the README
    runs the tools from .venv/bin, which ``make setup`` always creates."""
    assert not re.search(r"^\s*uv run ", README, re.M), "README runs `uv run` after setup"
    assert ".venv/bin/lipsweep --help" in README


def test_make_clean_removes_what_the_demo_and_the_report_write(tmp_path):
    """mlflow.db.lock (MLflow's SQLite lock) and reports/ (``lipsweep report``'s default
    --out) were neither ignored nor cleaned."""
    made = ["mlflow.db", "mlflow.db.lock", "reports/e/report.md", "exports/x/a", "ray_results/s/a"]
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
