"""`lipsweep sweep SPACE --dry-run` projects the grid's GPU-hours from the measured GPUs' kept
figures (lipsweep/sweep/gpu_measured.json), which are the kept suite JSONs cut down."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _sweep_helpers import space_file
from conftest import bench_module

from lipsweep.core.config_base import ConfigError
from lipsweep.search.space import load_space
from lipsweep.sweep.driver import dry_run_lines, ray_resources
from lipsweep.sweep.projection import MEASURED_FILE, Target, measured_gpus, project_trial

ROOT = Path(__file__).resolve().parents[1]
SUITES = [ROOT / "benchmarks" / f"gpu_suite_{g}.json" for g in ("h100", "h200")]


def test_the_kept_figures_are_the_kept_suites_cut_down() -> None:
    """Regenerating the packaged file from the kept suite JSONs changes nothing."""
    kept = json.loads((ROOT / "lipsweep" / "sweep" / MEASURED_FILE).read_text())
    assert bench_module("gpu_measured").build(SUITES) == kept


@pytest.mark.parametrize("suite", SUITES, ids=["h100", "h200"])
def test_the_cut_figures_project_the_suites_own_paper_trial(suite: Path) -> None:
    """The suite's own projection (with the batched ||J_f||) from the full JSON is what the
    packaged figures give for the same space."""
    data = json.loads(suite.read_text())
    want = data["trial"]["projection_lipschitz_batch"]
    figures = next(g for g in measured_gpus() if g["gpu"] == data["meta"]["gpu"])
    spec = load_space(ROOT / data["meta"]["space"])
    from lipsweep.settings.config import TrialConfig

    target = Target(spec.path, spec.name, len(spec.trials), TrialConfig.from_flat(spec.trials[0]))
    got = project_trial(figures, target, "cuda")
    assert got["total_s"] == want["total_s"] and got["missing"] == []
    assert got["hours_slowest_regularizer"] == want["hours_slowest_regularizer"]


def _paper(tmp_path: Path, resources: str) -> Path:
    text = (ROOT / "search_spaces" / "paper_cifar100.yaml").read_text()
    head, _, _ = text.partition("\nresources:")
    return space_file(tmp_path, head + f"\nresources: {resources}\n")


def test_dry_run_projects_on_the_named_gpu_or_says_it_was_never_measured(tmp_path: Path) -> None:
    h200 = dry_run_lines(load_space(_paper(tmp_path, "{cpu: 4, gpu: 1, accelerator_type: H200}")))
    text = "\n".join(h200)
    assert "NVIDIA H200 (2026-11-28" in text and "H100" not in text.split("accelerator")[-1]
    assert "31 trials 4.5-5.0 GPU-h" in text  # docs/benchmarks.md: the grid 4.5 H200-hours
    a10g = dry_run_lines(load_space(_paper(tmp_path, "{cpu: 4, gpu: 1, accelerator_type: A10G}")))
    assert a10g[-1] == "  A10G: never measured (measured: H100, H200); no projection"
    both = "\n".join(dry_run_lines(load_space(_paper(tmp_path, "{cpu: 4, gpu: 1}"))))
    assert "names no accelerator_type" in both and "5.1-5.6 GPU-h" in both and "4.5-5.0" in both
    cpu = dry_run_lines(load_space(ROOT / "search_spaces" / "smoke.yaml"))
    assert not any("GPU-h" in line for line in cpu)


def test_accelerator_type_reaches_ray_and_a_bad_one_names_the_field(tmp_path: Path) -> None:
    spec = load_space(_paper(tmp_path, "{cpu: 4, gpu: 0.5, accelerator_type: H100}"))
    assert ray_resources(spec.resources) == {"cpu": 4, "gpu": 0.5, "accelerator_type:H100": 0.001}
    assert ray_resources(load_space(_paper(tmp_path, "{cpu: 4, gpu: 1}")).resources) == {
        "cpu": 4,
        "gpu": 1,
    }
    with pytest.raises(ConfigError, match="resources.accelerator_type"):
        load_space(_paper(tmp_path, "{cpu: 4, gpu: 1, accelerator_type: 'H 100'}"))
    proc = subprocess.run(
        [sys.executable, "-m", "lipsweep", "sweep", str(tmp_path / "space.yaml"), "--dry-run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "resources.accelerator_type" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
