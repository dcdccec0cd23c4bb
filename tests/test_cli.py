"""The CLI contract: subcommands, exit status 2 with one line naming the field, nothing written."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from lipsweep.__main__ import main
from lipsweep.cli import COMMANDS, build_parser
from lipsweep.core.config_base import UsageError

ROOT = Path(__file__).resolve().parents[1]


def test_command_map_matches_parser():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)
    for name, p in sub.choices.items():
        # train, data, models, spaces and bench-search run without MLflow: no tracking option
        # that they would ignore
        no_mlflow = ("train", "data", "models", "spaces", "bench-search")
        has_uri = any("--tracking-uri" in a.option_strings for a in p._actions)
        assert has_uri == (name not in no_mlflow), name


def _run(tmp_path, *argv):
    return subprocess.run(
        [sys.executable, "-m", "lipsweep", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "yaml_text,field",
    [
        ("model: resnet50\n", "model"),
        ("dataset: cifar10\ndata_dir: /no/such/folder\n", "data_dir"),
        ("epochs: -3\n", "epochs"),
        ("patch_size: 5\n", "patch_size"),
        ("regularizer: jasmin\nk: 1\n", "k"),
        ("regularizer: specformer\naggregation: max\n", "aggregation"),
        ("epoch: 3\n", "epoch"),
    ],
)
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
    bad = _run(tmp_path, "sweep", "x.yaml", "--status-every", "-5")
    assert bad.returncode == 2 and "--status-every: must be a number of seconds" in bad.stderr


@pytest.mark.parametrize(
    "argv,line",
    [
        (["sweep", "smoke", "--num-cpus", "0"], "--num-cpus: must be >= 1, got 0"),
        (["sweep", "nosuch"], "SPACE: no such file and no shipped search space named 'nosuch'"),
        (["train", "--set", "epochs"], "--set: expected key=value"),
        (["train", "--set", "nope=1"], "--set: nope: unknown setting"),
        (
            ["confirm", "--experiment", "e", "--top", "1", "--run-id", "r"],
            "--top: excludes --run-id",
        ),
    ],
)
def test_option_errors_name_the_flag(capsys, argv, line):
    """The API's errors name the field (``num_cpus``); the CLI shows its flag instead."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"lipsweep {argv[0]}: error: {line}"), err


def test_help_settings_lists_every_setting(capsys):
    assert main(["train", "--help-settings"]) == 0
    out = capsys.readouterr().out
    for name in ("epochs", "regularizer", "k", "lam_q", "pgd_steps", "seed"):
        assert f"  {name} = " in out


def test_version_and_verbose_anywhere(capsys):
    from lipsweep import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"lipsweep {__version__}"
    parser = build_parser()
    assert parser.parse_args(["-v", "models"]).verbose
    assert parser.parse_args(["models", "-v"]).verbose
    assert parser.parse_args(["sweep", "s.yaml", "--dry-run", "--verbose"]).verbose
    assert not parser.parse_args(["models"]).verbose


def test_every_subcommand_help_has_a_description_and_an_example():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        text = p.format_help()
        assert p.description and p.description in text, name
        example = text.split("example:\n", 1)[1].strip().splitlines()
        assert len(example) == 1 and example[0].startswith(f"lipsweep {name}"), name


def _train_out(tmp_path: Path, **settings) -> Path:
    """An --out folder as `lipsweep train` leaves it: its marker, config.json and a checkpoint."""
    from lipsweep.api._train import TRAIN_MARKER
    from lipsweep.settings.config import TrialConfig

    out = tmp_path / "out"
    out.mkdir()
    (out / TRAIN_MARKER).write_text("lipsweep train\n")
    (out / "config.json").write_text(TrialConfig.from_flat(settings).to_json())
    (out / "checkpoint.safetensors").write_bytes(b"weights")
    return out


def test_train_into_out_of_another_config_exits_2_naming_the_fields(tmp_path, capsys):
    out = _train_out(tmp_path, epochs=3, regularizer="none")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    rc = main(
        [
            "train",
            "--out",
            str(out),
            "--set",
            "epochs=4",
            "--set",
            "regularizer=jasmin",
            "--set",
            "k=10",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "--out" in err[0] and "different config" in err[0] and "--overwrite" in err[0]
    for field in ("epochs (3 -> 4)", "k (", "regularizer ('none' -> 'jasmin')"):
        assert field in err[0], err[0]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing touched


def test_same_config_resumes_and_overwrite_starts_over(tmp_path):
    from lipsweep.api._train import check_out_config, prepare_out
    from lipsweep.settings.config import TrialConfig

    out = _train_out(tmp_path, epochs=3)
    same = TrialConfig.from_flat({"epochs": 3})
    check_out_config(out, same.to_flat(), overwrite=False)
    prepare_out(out, same.to_json(), overwrite=False)  # resume: the checkpoint stays
    assert (out / "checkpoint.safetensors").is_file()
    other = TrialConfig.from_flat({"epochs": 4})
    check_out_config(out, other.to_flat(), overwrite=True)
    prepare_out(out, other.to_json(), overwrite=True)  # start over: only the new config
    assert sorted(p.name for p in out.iterdir()) == [".lipsweep-train", "config.json"]
    assert '"epochs": 4' in (out / "config.json").read_text()
    (out / "config.json").write_text("{not json")
    with pytest.raises(UsageError, match="--overwrite"):
        check_out_config(out, TrialConfig.from_flat({"epochs": 3}).to_flat(), overwrite=False)


def _help(command: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if hasattr(a, "choices") and a.choices)
    return sub.choices[command].format_help()


def test_confirm_top_help_says_what_the_readme_says():
    """``--top N`` counts arms when pareto ranks arms (README, docs/contract.md), not the N
    best runs."""
    text = " ".join(_help("confirm").split())
    assert "the N best by Pareto rank: arms (every run of each) when an arm has 2 or more" in text
    assert "`--top N`: the N best arms" in (ROOT / "README.md").read_text()
