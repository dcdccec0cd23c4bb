"""benchmarks/gpu_sweep.py's own pieces (the whole run, `--cpu-smoke`, takes minutes: it is the
documented manual check in docs/benchmarks.md, "A sweep on the GPU")."""

from __future__ import annotations

import pytest
from conftest import bench_module

from lipsweep.search.space import load_space

gpu_sweep = bench_module("gpu_sweep")


def test_overlap_counts_the_most_runs_open_at_once() -> None:
    assert gpu_sweep.overlap([(0, 10), (5, 15), (10, 20)]) == 2  # an end closes before a start
    assert gpu_sweep.overlap([(0, 1), (2, 3)]) == 1
    assert gpu_sweep.overlap([(0, 9), (1, 8), (2, 7), (3, 6)]) == 4


@pytest.mark.parametrize("cpu_smoke", [False, True])
def test_the_space_is_a_valid_lipsweep_space_at_each_fraction(tmp_path, cpu_smoke: bool) -> None:
    import yaml

    for fraction, trials, at_once in ((0.5, 4, 2), (1.0, 2, 1)):
        sp = gpu_sweep.space(fraction, cpu_smoke, trials)
        path = tmp_path / f"{sp['name']}.yaml"
        path.write_text(yaml.safe_dump(sp))
        if not cpu_smoke:  # device: cuda is checked when the sweep starts, not at load
            spec = load_space(path)
            assert spec.resources.gpu == fraction and len(spec.trials) == trials
            assert spec.trials[0]["model"] == "vit_base_patch16_224"
            assert spec.trials[0]["optimizer"] == "sgd" and spec.trials[0]["mixup"] == 0.8
        else:
            spec = load_space(path)
            assert spec.resources.gpu == 0 and spec.max_concurrent_trials == at_once


def test_the_required_metrics_are_the_final_ones_a_trial_logs() -> None:
    sp = gpu_sweep.space(0.5, True)
    need = gpu_sweep.required_metrics({**sp["fixed"], **gpu_sweep.GRID[0]})
    assert need[0] == "acc_clean" and "acc_aa_2" in need and "lip_jacobian_median" in need


def test_bad_fractions_exit_2_naming_the_flag(capsys) -> None:
    assert gpu_sweep.main(["--fractions", "0.5,2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fractions" in err[0]


def test_tune_spans_read_each_trials_start_and_end_from_its_result_json(tmp_path) -> None:
    import json

    for name, rows in {
        "t0": [(100, 30.0), (120, 20.0)],  # started at 70, last report at 120
        "t1": [(110, 5.0)],
    }.items():
        (tmp_path / "exp" / name).mkdir(parents=True)
        text = "\n".join(json.dumps({"timestamp": t, "time_this_iter_s": d}) for t, d in rows)
        (tmp_path / "exp" / name / "result.json").write_text(text + "\n")
    assert gpu_sweep.tune_spans(tmp_path, "exp") == [(70.0, 120), (105.0, 110)]
