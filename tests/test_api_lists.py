"""``models``, ``spaces``, ``data prepare`` and the settings help are API functions too; the
CLI prints what they return."""

from __future__ import annotations

import numpy as np
import pytest

from lipsweep import api
from lipsweep.__main__ import main
from lipsweep.core.shipped import SPACES, shipped_names


def test_spaces_and_settings_help_are_what_the_cli_prints(capsys):
    spaces = api.spaces()
    assert [s.name for s in spaces] == shipped_names(SPACES) and "smoke" in [s.name for s in spaces]
    assert main(["spaces"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in shown] == [s.name for s in spaces]
    assert main(["train", "--help-settings"]) == 0
    assert capsys.readouterr().out == api.settings_help() + "\n"


def test_models_lists_timm_vits():
    assert "vit_tiny_patch16_224" in api.models()


def test_prepare_data_packs_an_npz_and_names_a_bad_field(tmp_path):
    src = tmp_path / "src.npz"
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (6, 32, 32, 3), dtype=np.uint8)
    np.savez(src, x_train=x[:4], y_train=np.arange(4), x_test=x[4:], y_test=np.arange(2))
    done = api.prepare_data(dataset="cifar10", source=str(src), dest=str(tmp_path / "d"))
    assert (done.train, done.test) == (4, 2) and done.file == f"{tmp_path}/d/cifar10.npz"
    assert (tmp_path / "d" / "cifar10.npz").is_file()
    assert (tmp_path / "d" / "cifar10.npz.manifest.json").is_file()
    with pytest.raises(api.ConfigError, match="^source: no such file"):
        api.prepare_data(dataset="cifar10", source=str(tmp_path / "no"), dest=str(tmp_path))
    with pytest.raises(api.ConfigError, match="^dataset: must be one of cifar10, cifar100"):
        api.DataPrepareOptions(dataset="mnist", source="s", dest="d")
