"""Tracking URIs: which ``--tracking-uri`` MLflow can use (shown through
:func:`lipsweep.core.redact.redact_uri`: no password).

A read command never creates a store, and a SQLite store's schema is created under a file lock
(:func:`sqlite_schema_lock`), so two fresh drivers cannot race on it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO, Optional

from lipsweep.core.redact import redact_uri

READ_HTTP_TIMEOUT_S = 8  # read commands: per-request timeout, no urllib3 retries
DB_SCHEMES = ("postgresql", "mysql", "mssql")


def _sqlite_path(uri: str) -> Optional[Path]:
    """The file of a ``sqlite:///`` URI (relative to the cwd, or absolute with 4 slashes)."""
    rest = uri[len("sqlite://") :].split("?", 1)[0]
    if not rest.startswith("/") or rest == "/":
        return None  # sqlite:// (in memory) or a host part: not a file
    return Path(rest[1:])


def check_tracking_uri(uri: str, must_exist: bool) -> None:
    """Refuse a ``--tracking-uri`` MLflow cannot use, before anything is written or waited on.

    Accepted: ``sqlite:///FILE``, ``http(s)://``, and ``postgresql|mysql|mssql://`` when their
    SQLAlchemy driver is installed. With ``must_exist`` (read commands) a SQLite file must
    already hold an MLflow store: reading never creates one. Raises UsageError naming the flag
    (the API shows the field).
    """
    from lipsweep.core.config_base import UsageError

    shown = redact_uri(uri)
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme == "sqlite":
        path = _sqlite_path(uri)
        if path is None:
            raise UsageError(
                f"--tracking-uri {shown}: not a SQLite file; use sqlite:///FILE "
                "(relative) or sqlite:////ABS/PATH"
            )
        if must_exist:
            _check_mlflow_db(path, shown)
        elif not path.parent.is_dir():
            raise UsageError(f"--tracking-uri {shown}: folder {path.parent} does not exist")
        return
    if scheme in ("http", "https"):
        if must_exist:  # fail fast instead of MLflow's minutes of urllib3 retries
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(READ_HTTP_TIMEOUT_S))
        return
    if scheme.split("+", 1)[0] in DB_SCHEMES:
        try:
            from sqlalchemy.engine import make_url

            make_url(uri).get_dialect().import_dbapi()
        except Exception as exc:  # noqa: BLE001 - a missing driver or an unparsable URL
            raise UsageError(
                f"--tracking-uri {shown}: database driver not usable "
                f"({type(exc).__name__}: {redact_uri(exc)})"
            ) from None
        return
    what = "a folder (MLflow's file store)" if scheme in ("", "file") else f"scheme {scheme!r}"
    raise UsageError(
        f"--tracking-uri {shown}: {what} is not supported; use sqlite:///FILE, "
        "http(s)://HOST:PORT or postgresql://..."
    )


def _check_mlflow_db(path: Path, shown: str) -> None:
    import sqlite3

    from lipsweep.core.config_base import UsageError

    if not path.is_file():
        raise UsageError(
            f"--tracking-uri {shown}: no MLflow store at {path} (nothing created); check the path"
        )
    try:
        con = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in con.execute("select name from sqlite_master")}
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise UsageError(
            f"--tracking-uri {shown}: {path} is not a SQLite database ({exc})"
        ) from None
    if not {"alembic_version", "experiments", "runs"} <= tables:
        raise UsageError(
            f"--tracking-uri {shown}: {path} holds no MLflow store (nothing "
            "created); check the path"
        )


def sqlite_schema_lock(uri: str) -> Optional[IO[str]]:
    """An exclusive file lock beside a SQLite store (``<db>.lock``), held while MLflow
    creates or migrates its schema, so two fresh drivers never race on ``duplicate column
    name``. Returns an open file to close, or None for other stores."""
    path = _sqlite_path(uri) if uri.lower().startswith("sqlite://") else None
    if path is None or not path.parent.is_dir():
        return None
    fh = open(path.with_name(path.name + ".lock"), "a")
    fcntl.flock(fh, fcntl.LOCK_EX)
    return fh
