"""An export's model card and file modes, as a user meets them: the card's
Python runs as written, and every file follows the umask like the rest of the folder."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest
import torch

from lipsweep.decide.export import write_export
from lipsweep.settings.config import TrialConfig
from lipsweep.vit.export_format import build_config_json, load_exported
from lipsweep.vit.models import create_model


def _export(folder: Path) -> tuple[torch.nn.Module, Path]:
    flat = TrialConfig.from_flat({"depth": 2, "embed_dim": 64, "num_heads": 4}).to_flat()
    model = create_model(TrialConfig.from_flat(flat).model)
    config = build_config_json(flat, (0.5,) * 3, (0.5,) * 3, {"run_id": "r1"})
    return model, write_export(folder, model.net.state_dict(), config, {"acc_clean": 1.0})


def test_model_card_python_runs_as_written(tmp_path):
    """The architecture line is Python (``False``, not JSON's ``false``) and rebuilds the
    exported network; the loading snippet loads it."""
    import timm
    from safetensors.torch import load_file

    model, folder = _export(tmp_path / "exp")
    card = (folder / "README.md").read_text()
    arch = re.search(r"- Architecture: `(timm\.create_model\(.*\))`", card).group(1)
    ast.parse(arch, mode="eval")  # a SyntaxError or NameError on a JSON `false`
    net = eval(arch, {"timm": timm})  # noqa: S307 - the card's own text, built above
    net.load_state_dict(load_file(folder / "model.safetensors"))  # strict: same architecture
    (snippet,) = re.findall(r"```python\n(.*?)```", card, re.S)
    scope: dict = {}
    exec(snippet.replace("<this folder>", str(folder)), scope)  # noqa: S102
    x = torch.rand(2, 3, 32, 32)
    assert torch.equal(scope["model"](x), load_exported(folder)(x))
    assert not scope["model"].training


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_export_files_follow_the_umask(tmp_path, umask):
    """``model.safetensors`` was 0600 whatever the umask (safetensors' own mode)."""
    old = os.umask(umask)
    try:
        _, folder = _export(tmp_path / "exp")
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}
    assert modes == dict.fromkeys(modes, 0o666 & ~umask), modes
    assert "model.safetensors" in modes
