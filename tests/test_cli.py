"""The CLI contract: subcommands, exit status 2 with one line naming the field, nothing written."""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from lipsweep.__main__ import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def test_command_map_matches_parser():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)
    for name, p in sub.choices.items():
        assert any("--tracking-uri" in a.option_strings for a in p._actions), name


def _run(tmp_path, *argv):
    return subprocess.run([sys.executable, "-m", "lipsweep", *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("yaml_text,field", [
    ("model: resnet50\n", "model"),
    ("dataset: cifar10\ndata_dir: /no/such/folder\n", "data_dir"),
    ("epochs: -3\n", "epochs"),
    ("patch_size: 5\n", "patch_size"),
    ("regularizer: jasmin\nk: 1\n", "k"),
    ("regularizer: specformer\naggregation: max\n", "aggregation"),
    ("epoch: 3\n", "epoch"),
])
def test_train_bad_config_exits_2_and_writes_nothing(tmp_path, yaml_text, field):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml_text)
    out = tmp_path / "out"
    proc = _run(tmp_path, "train", str(cfg), "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    err_lines = [ln for ln in proc.stderr.strip().splitlines() if "error" in ln]
    assert len(err_lines) == 1 and f"{field}:" in err_lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_unknown_flag_exits_2(tmp_path):
    assert _run(tmp_path, "sweep", "x.yaml", "--max-concurent-trials", "2").returncode == 2
    assert _run(tmp_path, "pareto").returncode == 2  # --experiment is required


def test_help_settings_lists_every_setting(capsys):
    assert main(["train", "--help-settings"]) == 0
    out = capsys.readouterr().out
    for name in ("epochs", "regularizer", "k", "lam_q", "pgd_steps", "seed"):
        assert f"  {name} = " in out
