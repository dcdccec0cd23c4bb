"""The README is the front door: its commands are the tested ones."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tested_block(text: str) -> str:
    m = re.search(r"## The tested sequence.*?```bash\n(.*?)```", text, re.S)
    assert m, "deploy/README.md lost its tested sequence"
    return m.group(1)


def test_readme_cluster_section_is_the_tested_sequence_word_for_word():
    tested = _tested_block((ROOT / "deploy" / "README.md").read_text())
    assert f"```bash\n{tested}```" in (ROOT / "README.md").read_text()


def test_readme_gives_exactly_the_two_make_commands_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "PLACEHOLDER" not in readme
