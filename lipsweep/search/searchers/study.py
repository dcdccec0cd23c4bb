"""Where a sweep's Optuna study lives: a SQLite file beside the MLflow store.

* ``--tracking-uri sqlite:///DIR/NAME.db``: ``DIR/NAME.optuna.db`` (beside the MLflow store);
* any other store (``http(s)://``, ``databricks``, ``postgresql://``, ...): the sweep's local
  state folder, ``<storage>/<experiment>/optuna.db``, or ``./.<experiment>-optuna.db`` when
  ``--storage`` is remote too (as the spill file, :func:`lipsweep.core.storage.spill_path`).

The study is named after the experiment, so ``--resume`` continues it and
``optuna-dashboard sqlite:///PATH`` shows every sweep of that store. Torch- and Ray-free;
Optuna is imported by :func:`study_storage` alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from lipsweep.core.storage import experiment_path, is_remote, local_path

STUDY_SUFFIX = ".optuna.db"
STATE_STUDY_FILE = "optuna.db"


def study_db(tracking_uri: str, storage: str, experiment: str) -> Path:
    """The absolute path of the SQLite file holding the sweep's Optuna study."""
    if tracking_uri.lower().startswith("sqlite:///"):
        rest = tracking_uri[len("sqlite:///") :].split("?", 1)[0]
        if rest and rest != ":memory:":
            db = Path(rest)
            return db.with_name(db.stem + STUDY_SUFFIX).resolve()
    exp = experiment_path(storage, experiment)
    if is_remote(exp):
        return (Path.cwd() / f".{experiment}-{STATE_STUDY_FILE}").resolve()
    return (local_path(exp) / STATE_STUDY_FILE).resolve()


def study_url(db: Path) -> str:
    """The Optuna RDB storage URL of ``db`` (what ``optuna-dashboard`` takes)."""
    return f"sqlite:///{db}"


def study_storage(db: Optional[Path]) -> Any:
    """Optuna's RDB storage of the study file ``db`` (its folder made), or None (a study in
    memory) when ``db`` is None. Imports Optuna."""
    if db is None:
        return None
    import optuna

    db.parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.RDBStorage(study_url(db))


def existing_study(db: Path, name: str) -> bool:
    """Whether ``db`` already holds an Optuna study called ``name`` (read-only; no Optuna)."""
    import sqlite3

    if not db.is_file():
        return False
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            row = con.execute("select 1 from studies where study_name = ?", (name,)).fetchone()
        finally:
            con.close()
    except sqlite3.Error:  # not an Optuna database (yet): Optuna will say so if it matters
        return False
    return row is not None


def check_new_study(db: Path, name: str) -> None:
    """A new sweep must not adopt an earlier sweep's study: UsageError naming --experiment."""
    from lipsweep.core.config_base import UsageError

    if existing_study(db, name):
        raise UsageError(
            f"--experiment {name}: the Optuna study {name!r} already exists in {db}; pass "
            "--resume to continue it, choose another --experiment, or delete it with "
            f"`optuna delete-study --study-name {name} --storage {study_url(db)}`"
        )
