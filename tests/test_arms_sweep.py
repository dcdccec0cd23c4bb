"""`pareto` over arms and `report` on a REAL tiny sweep: 2 arms x 2 seeds."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from _sweep_helpers import (
    JASMIN_MEAN,
    NONE,
    children,
    empty_store,
    lipsweep_cli,
    parents,
    ray_sandbox,
    run_sweep_cli,
    sweep_cmd,
    write_space,
)

pytestmark = [pytest.mark.slow, pytest.mark.ray]

# the helpers' tiny trial (2 blocks, 256 train / 32 eval images), 1 epoch, only ||J_f||
LEAN = {"lip_tokens": False, "lip_softmax": False, "lip_head_bounds": False}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    d = tmp_path_factory.mktemp("arms_sweep")
    space = write_space(d, [NONE, JASMIN_MEAN], epochs=1, fixed=LEAN, repeat={"seed": [0, 1]})
    uri = empty_store(d / "mlflow.db")
    with ray_sandbox() as box:
        proc = run_sweep_cli(sweep_cmd(d, space, tracking_uri=uri), d, box, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert len(children(uri)) == 4
    return d, uri


def cli(d: Path, *argv: str) -> str:
    return lipsweep_cli(d, *argv).stdout


def test_pareto_ranks_the_two_arms_by_their_means(swept):
    from lipsweep.decide.arms import metric_interval

    d, uri = swept
    out = cli(d, "pareto", "--experiment", "exp", "--tracking-uri", uri)
    assert "ranked arms on the front (4 runs in 2 arms" in out
    kids = children(uri)
    by_arm: dict[str, list] = {}
    for r in kids:
        by_arm.setdefault(r.data.tags["arm"], []).append(r)
    assert sorted(by_arm) == ["JaSMin k=0 λ=1e-2 mean", "baseline"]
    assert all(sorted(r.data.params["seed"] for r in rs) == ["0", "1"] for rs in by_arm.values())
    for name, rs in by_arm.items():
        assert len({(r.data.tags["arm_rank"], r.data.tags["arm_front"]) for r in rs}) == 1
        assert all(r.data.tags["pareto"] == r.data.tags["arm_front"] for r in rs)
        values = [r.data.metrics["acc_pgd_4"] for r in rs]
        s = metric_interval(values, "acc_pgd_4")  # n = 2: t_{0.975,1}=12.706, within [0, 100]
        half = 12.706205 * s.std / math.sqrt(2)
        assert s.hi == pytest.approx(min(s.mean + half, 100.0), abs=1e-4)
        assert s.lo == pytest.approx(max(s.mean - half, 0.0), abs=1e-4)
        if rs[0].data.tags["arm_front"] == "true":
            row = next(line for line in out.splitlines() if line.split("  ")[1:2] and name in line)
            assert f"{s.mean:.2f} [{s.lo:.2f}, {s.hi:.2f}]" in row and " 2 " in row
    assert "export pick" in out and "arm '" in out


def test_report_writes_markdown_figures_and_logs_them(swept):
    d, uri = swept
    out = cli(d, "report", "--experiment", "exp", "--tracking-uri", uri, "--out", "rep")
    assert "rep/report.md (2 arms, 4 runs" in out  # the folder as resolved
    md = (d / "rep" / "report.md").read_text()
    assert "| baseline | 2 | 0, 1 |" in md and "| JaSMin k=0 λ=1e-2 mean | 2 | 0, 1 |" in md
    assert "Paired differences to the baseline" in md and " p=" in md
    for png in ("pareto_scatter.png", "jacobian_by_arm.png", "jacobian_per_margin_by_arm.png"):
        assert f"]({png})" in md and (d / "rep" / png).stat().st_size > 5000
    assert all("lip_jacobian_per_margin_median" in r.data.metrics for r in children(uri))
    from _sweep_helpers import client

    logged = {a.path for a in client(uri).list_artifacts(parents(uri)[0].info.run_id, "report")}
    assert {"report/report.md", "report/jacobian_per_margin_by_arm.png"} <= logged
