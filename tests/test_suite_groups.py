"""The suite's own scheduling rule (tests/conftest.py): a test file that starts Ray is named in
``_RAY_FILES``, so that pytest-xdist runs it on the one worker that runs sweeps."""

from __future__ import annotations

import os

import pytest
from conftest import check_no_new_ray_session


def test_a_ray_session_started_outside_the_ray_group_fails_the_test():
    root = os.path.join(os.environ["RAY_TMPDIR"], "ray")  # where Ray keeps its sessions
    made_root = not os.path.isdir(root)
    os.makedirs(root, exist_ok=True)
    before = set(os.listdir(root))
    os.mkdir(os.path.join(root, "session_probe"))  # what `ray.init` or a sweep leaves
    try:
        with pytest.raises(pytest.fail.Exception, match=r"x\.py started Ray \(session_probe "):
            check_no_new_ray_session("x.py", before)
    finally:
        os.rmdir(os.path.join(root, "session_probe"))
        if made_root:
            os.rmdir(root)
    check_no_new_ray_session("x.py", before)  # nothing new: passes
