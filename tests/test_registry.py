"""The one registry mechanism (lipsweep/core/registry.py) every family uses."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from lipsweep.core.registry import Registry


@dataclass(frozen=True)
class _Knob:
    turns: int = 1

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise ValueError("turns must be >= 1")


def test_a_declared_member_is_listed_and_validated_without_importing_it():
    code = (
        "import sys; from lipsweep.core.registry import Registry\n"
        "r = Registry('w'); r.declare('csv', 'csv:writer', info={'x': 1})\n"
        "assert r.names() == ['csv'] and r.entry('csv').info['x'] == 1\n"
        "assert not r.entry('csv').loaded and 'csv' not in sys.modules\n"
        "import csv; assert r.load('csv') is csv.writer and r.entry('csv').loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_register_settings_create_and_errors():
    fam: Registry = Registry("knob", lambda n, known: KeyError(f"no knob {n}; have {known}"))

    @fam.register("twist", settings=_Knob, info={"unit": "turn"})
    def twist(settings: _Knob) -> int:
        return settings.turns * 2

    assert fam.names() == ["twist"] and fam.names("tw*") == ["twist"] and fam.names("x*") == []
    assert fam.create("twist", fam.settings("twist", {"turns": 3})) == 6
    with pytest.raises(ValueError, match="turns"):
        fam.settings("twist", {"turns": 0})
    with pytest.raises(KeyError, match=r"no knob spin; have \['twist'\]"):
        fam.load("spin")
    with pytest.raises(ValueError, match="already registered"):
        fam.add("twist", lambda s: 0)
    fam.add("twist", twist)  # the same object again: a no-op
    assert fam.remove("twist") is twist and "twist" not in fam


def test_a_declared_member_takes_the_registered_implementation_and_keeps_its_facts():
    fam: Registry = Registry("thing")
    fam.declare("json", "json:dumps", settings=_Knob, info={"light": True})
    import json

    fam.add("json", json.dumps)  # what the module's decorator does when it is imported
    entry = fam.entry("json")
    assert entry.loaded and entry.settings is _Knob and entry.info["light"]
    assert fam.create("json", [1]) == "[1]"


def test_a_family_keeps_declared_specs_and_takes_a_plugins_spec_three_ways():
    """The one family object: a declared member keeps its spec when its module registers it;
    an undeclared one gives its spec as ``spec=``, as keywords, or as class attributes, else a
    TypeError naming the fields; the family's check and hook run on every spec."""
    from lipsweep.core.registry import Family

    @dataclass(frozen=True)
    class Facts:
        unit: str
        scale: float = 1.0

    seen: list[tuple[str, str]] = []

    def check(name: str, spec: Facts) -> None:
        if spec.unit == "bad":
            raise ValueError(f"{name}: bad unit")

    fam = Family(
        "gadget",
        spec_type=Facts,
        check=check,
        on_register=lambda name, obj, spec: seen.append((name, spec.unit)),
    )
    fam.declare("meter", "builtins:len", spec=Facts("m"))

    @fam.register("meter")
    class Meter:
        unit = "ignored: the declared spec stays"

    @fam.register("inch", unit="in", scale=0.0254)
    class Inch:
        pass

    @fam.register("foot")
    class Foot:
        unit, scale = "ft", 0.3048

    fam.register("yard", spec=Facts("yd", 0.9144))(lambda: None)
    assert fam.spec("meter") == Facts("m") and fam.load("meter") is Meter
    assert fam.spec("inch") == Facts("in", 0.0254) and fam.spec("foot") == Facts("ft", 0.3048)
    assert [s.unit for s in fam.specs()] == ["m", "in", "ft", "yd"]
    assert seen == [("meter", "m"), ("inch", "in"), ("foot", "ft"), ("yard", "yd")]
    with pytest.raises(TypeError, match=r"gadget 'mile' is not declared.*\['unit'\]"):
        fam.register("mile")(type("Mile", (), {}))
    with pytest.raises(ValueError, match="mile: bad unit"):
        fam.register("mile", unit="bad")(type("Mile", (), {}))
    assert not fam.is_member("mile") and fam.is_member("yard")
    fam.unregister("yard")
    assert fam.names() == ["foot", "inch", "meter"]


# ---------------------------------------------------------------- the documented recipe
_RECIPE_CLASS = '''"""A test's regularizer: lam times the mean square of the parameters."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lipsweep.regularizers._registry import register_regularizer
from lipsweep.regularizers.base import Regularizer


@register_regularizer("recipe_sq")
class RecipeSquares(Regularizer):
    def __init__(self, settings: Any = None) -> None:
        super().__init__(settings)
        self.lam = self.settings.recipe_lam
        self._model: nn.Module | None = None

    def attach(self, model: nn.Module) -> None:
        self._model = model

    def detach(self) -> None:
        self._model = None

    def terms(self) -> dict[str, torch.Tensor]:
        squares = [p.pow(2).mean() for p in self._model.parameters()]
        return {"recipe_sq": torch.stack(squares).mean()}

    @property
    def weights(self) -> dict[str, float]:
        return {"recipe_sq": self.lam}
'''

_RECIPE_INDEX = '''
from dataclasses import dataclass

from lipsweep.core.config_base import check_positive
from lipsweep.regularizers._registry import declare_regularizer
from lipsweep.regularizers.spec import RegularizerSpec


@dataclass(frozen=True)
class RecipeSettings:
    """The test's regularizer."""

    recipe_lam: float = 1e-3
    """Recipe: weight of the mean square of the parameters (> 0)."""

    def __post_init__(self) -> None:
        check_positive("recipe_lam", self.recipe_lam)


RECIPE = RegularizerSpec(name="recipe_sq", doc="a test's", title="Recipe", settings=RecipeSettings)
declare_regularizer(RECIPE, "lipsweep.regularizers.recipe_sq:RecipeSquares")
'''


@pytest.mark.slow
def test_a_regularizer_is_the_two_files_the_docs_name(tmp_path):
    """docs/architecture.md's recipe, followed in a copy of the repository: a regularizer's
    class in a new file of lipsweep/regularizers/ and its settings, spec and declare line in
    regularizers/_registry.py, and nothing else; the family's member tests (the vocabulary
    rules, and every test of tests/test_regularizers.py parametrized over the members) take
    it without an edit."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc")
    for name in ("lipsweep", "tests"):
        shutil.copytree(root / name, tmp_path / name, ignore=ignore)
    shutil.copy(root / "pyproject.toml", tmp_path)
    regs = tmp_path / "lipsweep" / "regularizers"
    (regs / "recipe_sq.py").write_text(_RECIPE_CLASS)
    with (regs / "_registry.py").open("a") as index:
        index.write(_RECIPE_INDEX)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTEST_ADDOPTS": ""}
    env.pop("PYTEST_XDIST_WORKER", None)
    check = "from lipsweep.regularizers import list_regularizers; print(list_regularizers())"
    listed = subprocess.run(
        [sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert "recipe_sq" in listed.stdout, listed.stdout + listed.stderr
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    runs = [
        ["tests/test_vocab.py"],
        ["tests/test_regularizers.py", "-k", "recipe_sq", "-rA"],
    ]
    for args in runs:
        proc = subprocess.run(
            [*argv, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]  # 5: none ran
    for test in ("test_interface", "test_config_round_trip_for_every_regularizer"):
        assert f"PASSED tests/test_regularizers.py::{test}[recipe_sq]" in proc.stdout, proc.stdout
