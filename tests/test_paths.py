"""lipsweep.core.paths: the paths a command prints."""

from __future__ import annotations

from lipsweep.core.paths import shown_path


def test_printed_paths_are_relative_to_the_working_folder_under_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / "exports" / "smoke-best") == "exports/smoke-best"
    assert shown_path("reports/x") == "reports/x"
    assert shown_path("/elsewhere/x") == "/elsewhere/x"  # not under it: as given
    assert shown_path(tmp_path.parent / "y") == str(tmp_path.parent / "y")
