"""The Makefile's housekeeping targets, run in a temp folder holding a copy of it: ``make
clean`` removes what the demo and the report write (and git ignores it), and ``make
optuna-dashboard`` runs the dashboard from .venv, installed from the lock."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


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


def test_optuna_dashboard_comes_from_the_lock_not_the_system_pip(tmp_path):
    """`pip install optuna-dashboard`, after activating .venv (which has no pip), would install
    into the system Python: `make optuna-dashboard` runs it from .venv, installed from the
    lock's `dashboard` extra."""
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
