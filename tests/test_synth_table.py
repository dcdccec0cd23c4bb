"""benchmarks/synth_table.py: synthetic bench-search tables with a known front."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import bench_module

from lipsweep.search import replay

ROOT = Path(__file__).resolve().parents[1]
OBJECTIVES = [("acc_clean", "max"), ("acc_pgd_4", "max"), ("lip_jacobian_median", "min")]


def _non_dominated(points: np.ndarray, directions: list[str]) -> list[int]:
    """Indices of the rows no other row dominates (pairwise, written here on purpose rather
    than taken from lipsweep, so the generator's own check is checked independently)."""
    signs = np.array([1.0 if d == "min" else -1.0 for d in directions])
    p = points * signs  # all minimised
    return [
        i
        for i in range(len(p))
        if not any(np.all(p[j] <= p[i]) and np.any(p[j] < p[i]) for j in range(len(p)) if j != i)
    ]


def test_a_tiny_table_reads_back_with_its_true_front_and_noise_free_seeds(tmp_path):
    synth = bench_module("synth_table")
    spec = synth.Spec(configs=12, seeds=3, epochs=4, front=3, early_rho=-0.5, seed=1)
    csv_path, truth_path = synth.write(synth.generate(spec), tmp_path / "t.csv")
    assert truth_path == tmp_path / "t.truth.json"

    # the recorded grids' format: the same header, read by bench-search's own reader
    with csv_path.open() as fh, (ROOT / "benchmarks/data/tiny_grid.csv").open() as rec:
        assert next(csv.reader(fh)) == next(csv.reader(rec))
    table = replay.load_table(csv_path)
    assert table.params == synth.PARAMS and table.epochs == 4
    assert len(table.configs) == 12 and all(c.seeds == ("0", "1", "2") for c in table.configs)
    assert set(table.per_epoch) == set(synth.PER_EPOCH)
    assert set(table.final) == set(synth.FINAL) | set(synth.PER_EPOCH)  # per-epoch: last value
    replay.check_objectives(table, OBJECTIVES)
    assert replay.stop_metrics(table, OBJECTIVES, ()) == [
        ("acc_clean", "max"), ("probe_acc_pgd_4", "max"), ("probe_lip_jacobian_median", "min")
    ]  # fmt: skip
    assert table.compute == pytest.approx(sum(r["epoch_seconds"] for r in replay.iter_rows(table)))

    # the stated front is the front of the noise-free final objectives
    truth = json.loads(truth_path.read_text())
    names, dirs = [n for n, _ in OBJECTIVES], [d for _, d in OBJECTIVES]
    finals = np.array([[c["final"][n] for n in names] for c in truth["configs"]])
    front = [truth["configs"][i]["key"] for i in _non_dominated(finals, dirs)]
    assert len(front) == spec.front == truth["front_size"] and set(front) == set(truth["front"])
    early = np.array([c["early_standing"]["clean"] for c in truth["configs"]])
    assert np.corrcoef(early, finals[:, 0])[0, 1] == pytest.approx(-0.5)
    assert synth.true_hypervolume_fraction(truth, truth["front"]) == pytest.approx(1.0)

    # no noise: every seed has the same values, whose mean is the ground truth
    quiet = dataclasses.replace(spec, seed_noise=0.0, epoch_noise=0.0, time_jitter=0.0)
    synth.write(synth.generate(quiet), tmp_path / "quiet.csv")
    table = replay.load_table(tmp_path / "quiet.csv")
    truth = json.loads((tmp_path / "quiet.truth.json").read_text())
    for c, true in zip(table.configs, truth["configs"]):
        assert c.key == true["key"]
        for s in c.seeds[1:]:
            np.testing.assert_array_equal(c.seconds[s], c.seconds["0"])
            for name, values in c.metrics[s].items():
                np.testing.assert_array_equal(values, c.metrics["0"][name])
        assert table.objectives(c, names) == pytest.approx([true["final"][n] for n in names])
    assert set(truth["table_front"]) == set(truth["front"])
    # the same settings give the same table; its structure does not depend on the noise
    assert synth.generate(spec).rows == synth.generate(spec).rows
    assert [c["final"] for c in truth["configs"]] == [
        c["final"] for c in json.loads((tmp_path / "t.truth.json").read_text())["configs"]
    ]


def test_measurement_se_columns_are_the_generators_own_jitter(tmp_path):
    """--measurement-se: ``<metric>_se`` is ``epoch_noise`` points for the accuracies and
    ``LIP_REL * epoch_noise`` of the value for ||J_f|| (its jitter is on the log scale); the
    other columns are the plain table's."""
    synth = bench_module("synth_table")
    spec = synth.Spec(configs=12, seeds=2, epochs=3, front=3, epoch_noise=2.0, seed=1)
    plain = synth.generate(spec)
    rows = synth.with_measurement_se(plain, spec).rows
    row = rows[5]
    assert row["acc_clean_se"] == row["probe_acc_pgd_4_se"] == 2.0
    lip = row["probe_lip_jacobian_median"]
    assert row["probe_lip_jacobian_median_se"] == pytest.approx(0.025 * 2.0 * lip)
    assert {k: v for k, v in row.items() if not k.endswith("_se")} == plain.rows[5]
    table = replay.load_table(synth.write(synth.Synth(rows, plain.truth), tmp_path / "t.csv")[0])
    assert "probe_acc_pgd_4_se" in table.per_epoch
