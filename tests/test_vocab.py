"""Each regularizer owns its vocabulary: one spec, registered from anywhere, reaches
the config, --help-settings, --dry-run labels, the Pareto table, plots and the export card."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from _sweep_helpers import space_file

from lipsweep.core.config_base import ConfigError, check_choice, check_positive
from lipsweep.regularizers import (
    RegularizerSpec,
    register_regularizer,
    unregister_regularizer,
)

ROOT = Path(__file__).resolve().parents[1]


class ToyRegularizer:
    """A test-only regularizer: no penalty (its class is never needed by the presenters)."""


@dataclass(frozen=True)
class ToySettings:
    toy_alpha: float = 0.5
    """Toy: strength (> 0). Default 0.5."""
    toy_mode: str = "a"
    """Toy: 'a' or 'b'. Default 'a'."""

    def __post_init__(self) -> None:
        check_positive("toy_alpha", self.toy_alpha)
        check_choice("toy_mode", self.toy_mode, ("a", "b"))


TOY = RegularizerSpec(
    name="toy_reg",
    doc="test only",
    title="Toy",
    short="T",
    settings=ToySettings,
)


@pytest.fixture()
def toy():
    register_regularizer("toy_reg", spec=TOY)(ToyRegularizer)
    yield TOY
    unregister_regularizer(TOY.name)


def test_test_only_regularizer_reaches_every_presenter(toy, tmp_path, capsys):
    from lipsweep.__main__ import main
    from lipsweep.decide.export import _model_card
    from lipsweep.decide.front import build_front
    from lipsweep.decide.pareto import config_label
    from lipsweep.decide.plots import _style
    from lipsweep.settings.config import TrialConfig
    from lipsweep.vit.export_format import build_config_json

    assert main(["train", "--help-settings"]) == 0
    out = capsys.readouterr().out
    assert "  toy_alpha = 0.5\n      Toy: strength" in out and "'toy_reg' (test only)" in out
    grid = [{"regularizer": "toy_reg", "toy_alpha": [0.5, 2.0]}]
    space = space_file(tmp_path, {"name": "toy", "fixed": {"epochs": 1}, "grid": grid})
    assert main(["sweep", str(space), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "toy_reg toy_alpha=0.5 toy_mode=a" in out and "toy_reg toy_alpha=2.0" in out
    with pytest.raises(ConfigError) as err:  # its rule runs once, naming its field
        TrialConfig.from_flat({"regularizer": "toy_reg", "toy_alpha": -1})
    assert err.value.field == "toy_alpha"
    flat = TrialConfig.from_flat({"regularizer": "toy_reg", "toy_mode": "b"}).to_flat()
    assert flat["toy_alpha"] == 0.5 and flat["toy_mode"] == "b"
    params = {k: str(v) for k, v in flat.items()}
    assert config_label(params) == "Toy toy_alpha=0.5 toy_mode=b"
    table = build_front(
        [
            {
                "run_id": "r1",
                "params": params,
                "metrics": {"acc_clean": 50.0, "acc_pgd_4": 10.0, "acc_aa_2": 5.0},
            }
        ],
        ["acc_clean:max", "acc_pgd_4:max", "acc_aa_2:max"],
    ).table
    assert "toy_alpha" in table.splitlines()[0] and "toy_reg" in table
    assert _style("toy_reg", {})[2] == "Toy"
    card = _model_card(build_config_json(flat, (0.5,) * 3, (0.5,) * 3, {}), {})
    assert "toy_reg (toy_alpha=0.5, toy_mode=b)" in card


def _member_names() -> re.Pattern[str]:
    """Every registered regularizer's name (``none`` aside) and its settings' names of more
    than 3 characters (``k`` and ``lam`` are too short to search for)."""
    from lipsweep.regularizers import list_regularizers
    from lipsweep.regularizers.config import RegularizerConfig

    words = [n for n in list_regularizers() if n != "none"]
    words += [k for k in RegularizerConfig.flat_keys()[1:] if len(k) > 3]
    return re.compile("|".join(re.escape(w) for w in words), re.IGNORECASE)


def test_no_module_outside_regularizers_names_a_regularizer():
    """Members come from the registry, so a new regularizer is checked without an edit here."""
    names = _member_names()
    assert names.search("jasmin") and names.search("lam_q")  # the built-ins are among them
    pkg = ROOT / "lipsweep"
    hits = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in sorted(pkg.rglob("*.py"))
        if "regularizers" not in p.relative_to(pkg).parts
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if names.search(line)
    ]
    assert not hits, "\n".join(hits)


def test_declaration_layer_is_torch_free():
    """The flat keys and the member list, read in a fresh interpreter without torch, are the
    registry's (read here, where torch may be loaded already)."""
    from lipsweep.regularizers import RegularizerConfig, list_regularizers

    code = (
        "import sys; import lipsweep.regularizers as r, lipsweep.core.metric_names; "
        "from lipsweep.regularizers import RegularizerConfig, create_regularizer; "
        "print(list(RegularizerConfig.flat_keys())); "
        "print(RegularizerConfig(regularizer='jasmin', k=10).to_flat()); "
        "print(r.list_regularizers(), 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    assert out == [
        str(list(RegularizerConfig.flat_keys())),
        "{'regularizer': 'jasmin', 'k': 10, 'lam': 0.01, 'aggregation': 'mean'}",
        f"{list_regularizers()} False",
    ]
    assert {"jasmin", "none", "specformer"} <= set(list_regularizers())
