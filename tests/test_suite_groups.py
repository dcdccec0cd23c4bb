"""The suite's own scheduling rule (tests/conftest.py): a test that starts Ray is marked
``ray``, so that pytest-xdist runs it on the one worker that runs sweeps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import check_no_new_ray_session


def test_a_ray_session_started_outside_the_ray_group_fails_the_test():
    root = os.path.join(os.environ["RAY_TMPDIR"], "ray")  # where Ray keeps its sessions
    made_root = not os.path.isdir(root)
    os.makedirs(root, exist_ok=True)
    before = set(os.listdir(root))
    os.mkdir(os.path.join(root, "session_probe"))  # what `ray.init` or a sweep leaves
    try:
        with pytest.raises(pytest.fail.Exception, match=r"x\.py started Ray \(session_probe .*"
                           r"pytestmark = pytest\.mark\.ray"):  # fmt: skip
            check_no_new_ray_session("x.py", before)
    finally:
        os.rmdir(os.path.join(root, "session_probe"))
        if made_root:
            os.rmdir(root)
    check_no_new_ray_session("x.py", before)  # nothing new: passes


def test_the_ray_group_is_the_ray_mark():
    """The group comes from the mark, not from a list of file names."""
    from conftest import _group

    class Item:
        def __init__(self, name: str, marked: bool) -> None:
            self.path = Path(name)
            self.marked = marked

        def get_closest_marker(self, name: str):
            return object() if self.marked and name == "ray" else None

    assert _group(Item("test_anything.py", True)) == "ray"
    assert _group(Item("test_anything.py", False)) == "test_anything.py"
    assert _group(Item("test_head_bounds.py", False)) == "test_evaluate.py"
