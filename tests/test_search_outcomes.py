"""bench-search's outcome figures: what a researcher keeps (final hypervolume, front
configurations stopped) and pays (total compute, against the oracle's), and ``--seeds``."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Mapping, Optional

import pytest

from lipsweep.core.config_base import ConfigError
from lipsweep.search import replay
from lipsweep.search.protocol import CONTINUE, STOP, ListMember, Repeats

OBJ = [("a", "max"), ("b", "max")]


def _three(path: Path) -> Path:
    """Maximise a and b, seeds 0 and 1, epochs of 1 s and 2 s (18 s in all): A (3, 1) and
    B (1, 3) on the front (seed means a + 0.005), C (1, 1) dominated by B."""
    rows = [
        {"config": key, "seed": s, "epoch": e, "epoch_seconds": float(e), "loss": 1.0,
         "a": a + 0.01 * s if e == 2 else "", "b": b if e == 2 else ""}
        for key, (a, b) in {"C": (1.0, 1.0), "A": (3.0, 1.0), "B": (1.0, 3.0)}.items()
        for s in (0, 1)
        for e in (1, 2)
    ]  # fmt: skip
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


class StopAtFirstEpoch(replay.NoStop):
    """Stops every trial of the named configurations at its first report."""

    def __init__(self, keys: set[str]) -> None:
        self.keys = keys

    def group(self, trial_id: str, flat: Mapping[str, Any]) -> str:
        return str(flat["config"])

    def decide(self, trial_id: str, group: str, t: float, metrics: Mapping[str, Any]) -> str:
        return STOP if group in self.keys and t >= 1 else CONTINUE

    def report(self, trial_id: str, result: Optional[Mapping[str, Any]] = None) -> None:
        pass


def _run(table: replay.Table, stop: set[str]) -> replay.Replay:
    order = ListMember([{"config": k} for k in ("A", "B", "C")])
    search = Repeats(replay.TableMember(order, table), table.configs[0].seeds, ["a", "b"])
    return replay.simulate(table, search, StopAtFirstEpoch(stop), OBJ, workers=1)


def test_outcomes_match_a_hand_computation(tmp_path):
    """Stopping A (on the front) at epoch 1: both seeds pay 1 s, B and C run in full (6 s
    each): 14 of 18 s; B alone holds 0.44 / 0.84 of the front's hypervolume (reference point
    0.1 of the front's range past its worst: boxes 2.2 x 0.2 each, overlap 0.2 x 0.2); one
    front configuration stopped. Stopping C (off the front): 14 s, the whole front, none."""
    table = replay.load_table(_three(tmp_path / "t.csv"))
    lost, right = _run(table, {"A"}), _run(table, {"C"})
    scores = replay._scores([lost, right], budget=1.0)
    assert scores["final_hv_fraction"]["per_replay"] == pytest.approx([0.44 / 0.84, 1.0])
    assert scores["total_compute_fraction"]["per_replay"] == pytest.approx([14 / 18, 14 / 18])
    assert scores["front_configurations_stopped"]["per_replay"] == [1, 0]
    assert scores["front_configurations_stopped"]["median"] == 0.5
    assert replay.front_kept(scores) == 0.5
    assert replay.front_keys(table, OBJ) == ["A", "B"]


def test_the_summary_and_the_printed_table_carry_the_outcomes(tmp_path, capsys):
    """The oracle runs A and B in full (12 s) and stops C at epoch 1 (2 x 1 s): 14/18 of the
    grid; the grid spends all 18 s, 18/14 = 1.29x the oracle's, and keeps the front. With
    ``--seeds 1`` the grid is 9 s, the oracle 7 s."""
    from lipsweep.__main__ import main

    path = _three(tmp_path / "t.csv")
    out = tmp_path / "out"
    argv = ["bench-search", "--table", str(path), "--objective", "a:max", "--objective",
            "b:max", "--stop-on", "loss:min", "--replays", "1", "--method", "grid",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle_compute_fraction"] == pytest.approx(14 / 18)
    grid = summary["methods"]["grid"]
    assert grid["total_compute_fraction"]["median"] == pytest.approx(1.0)
    assert grid["final_hv_fraction"]["median"] == pytest.approx(1.0)
    lines = capsys.readouterr().out.splitlines()
    header = next(x for x in lines if "front kept" in x)
    assert header.split()[0] == "method" and "x oracle" in header
    row = next(x for x in lines if x.split()[:1] == ["grid"]).split()
    # method, HV@budget, >=0.8, to 90%, final HV, front kept, compute, x oracle, front stopped
    assert (row[5], row[6], row[7], row[8]) == ("100%", "100.0%", "1.29", "0")
    assert main([*argv, "--seeds", "1"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seeds"] == 1 and summary["oracle_compute_fraction"] == pytest.approx(7 / 9)
    assert summary["grid"]["compute_s"] == pytest.approx(9.0)


def test_first_seeds_keeps_each_configurations_first_seeds_and_refuses_others(tmp_path, capsys):
    from lipsweep.__main__ import main

    path = _three(tmp_path / "t.csv")
    table = replay.load_table(path)
    one = replay.first_seeds(table, 1)
    assert [c.seeds for c in one.configs] == [("0",)] * 3
    assert one.objectives(one.configs[1], ["a"])[0] == pytest.approx(3.0)  # seed 0's alone
    for bad in (0, 3, True):
        with pytest.raises(ConfigError, match="seeds"):
            replay.first_seeds(table, bad)
    for bad in ("0", "3"):
        rc = main(["bench-search", "--table", str(path), "--objective", "a:max",
                   "--out", str(tmp_path / "o"), "--seeds", bad])  # fmt: skip
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and "--seeds" in err, (bad, err)


def test_the_outcome_figures_match_a_hand_computation():
    """benchmarks/search_figures.py --outcomes: two replays, HV 0.5 then 1.0 at compute 0.3
    and 0.6 (spent 0.6, no front configuration stopped) and 0.8 at 0.5 (spent 0.5, two
    stopped); oracle 0.4, budget 0.4: HV at 40% 0.5 and 0 (median 0.25), final 1.0 and 0.8
    (median 0.9), half keep the front and half lose a front configuration, 1.0 stopped on
    average, compute median 0.55, 1.375x the oracle."""
    from conftest import bench_module

    runs = [
        replay.Replay(compute=[0.3, 0.6], hv=[0.5, 1.0], spent=0.6),
        replay.Replay(compute=[0.5], hv=[0.8], stopped=2, spent=0.5, front_stopped=2),
    ]
    row = bench_module("search_figures").outcome_row(runs, oracle=0.4, budget=0.4)
    assert row == pytest.approx({
        "replays": 2, "hv_at_budget": 0.25, "final_hv": 0.9, "front_kept": 0.5,
        "lost_a_front_configuration": 0.5, "front_stopped_mean": 1.0, "total_compute": 0.55,
        "x_oracle": 1.375,
    })  # fmt: skip


def test_the_outcome_rows_not_replayed_are_kept_from_the_committed_file(tmp_path, monkeypatch):
    """``--outcomes --method moasha`` rewrites moasha's rows in place and keeps the others."""
    from conftest import bench_module

    figures = bench_module("search_figures")
    monkeypatch.setattr(figures, "OUT", tmp_path)
    committed = [
        {"table": "t", "seeds": 3, "method": "moasha", "replays": 10},
        {"table": "t", "seeds": 3, "method": "grid", "replays": 10},
    ]
    (tmp_path / "outcomes.json").write_text(json.dumps(committed))
    new = [
        {"table": "t", "seeds": 3, "method": "moasha", "replays": 50},
        {"table": "u", "seeds": 1, "method": "moasha", "replays": 50},
    ]
    assert figures.kept_outcomes(new) == [new[0], committed[1], new[1]]
