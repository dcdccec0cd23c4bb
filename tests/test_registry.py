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
