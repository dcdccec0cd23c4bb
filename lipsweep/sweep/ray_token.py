"""The Ray auth token file of ``lipsweep sweep --dashboard``: readable by its owner only.

With the dashboard on, lipsweep leaves Ray's token auth to Ray (its login asks for the token
that ``ray get-auth-token`` prints), and Ray 2.60 writes ``~/.ray/auth_token`` with the process
umask: ``-rw-r--r--`` under the usual 022, so every user of the machine could read the token
and run code on the cluster. :func:`private_token_file` creates the file first, mode 600, and
tightens one that already exists; Ray then reads it instead of writing its own.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from lipsweep.sweep import ray_internals

_log = logging.getLogger(__name__)


def token_path() -> Path:
    """Where Ray keeps its default token: ~/.ray/auth_token."""
    return Path.home() / ".ray" / "auth_token"


def private_token_file() -> Path:
    """``~/.ray/auth_token`` with mode 600 (created with a new Ray token if missing), in a
    ``~/.ray`` that others cannot list if lipsweep creates it; returns the path."""
    path = token_path()
    given = any(os.environ.get(v) for v in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"))
    if not given and not os.path.lexists(path):  # else Ray reads the token given, writes none
        if not path.parent.exists():
            path.parent.mkdir(mode=0o700, parents=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(ray_internals.new_auth_token())
        ray_internals.reset_auth_token_cache()
    if not os.path.lexists(path):
        return path
    mode = stat.S_IMODE(os.lstat(path).st_mode)
    if mode & 0o077 and not path.is_symlink():
        os.chmod(path, mode & 0o700)
        _log.warning("%s was readable by others (mode %o); now %o", path, mode, mode & 0o700)
    return path
