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
