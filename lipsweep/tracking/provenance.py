"""What every run records about where it came from: lipsweep's version, its git commit, and
the dataset as an MLflow input (name, digest, source; no data uploaded)."""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any, Optional

from lipsweep.tracking.schema import DATASET_FIELDS, TAG_GIT_COMMIT, TAG_VERSION
from lipsweep.tracking.uri import redact_uri


@functools.lru_cache(maxsize=1)
def provenance_tags() -> dict[str, str]:
    """Tags every run gets: the lipsweep version and, when lipsweep runs from a git checkout,
    its commit (:data:`TAG_GIT_COMMIT`); no git or no checkout is not an error."""
    from lipsweep.core.version import __version__

    tags = {TAG_VERSION: __version__}
    pkg = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(
            ["git", "-C", str(pkg), "rev-parse", "--show-toplevel", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return tags
    lines = out.stdout.split()
    if out.returncode == 0 and len(lines) == 2 and Path(lines[0]).resolve() == pkg.parent:
        tags[TAG_GIT_COMMIT] = lines[1]
    return tags


def dataset_input(config: dict[str, Any]) -> Optional[dict[str, str]]:
    """The MLflow dataset (name, digest, source; no data uploaded) of a flat trial config,
    or None without a ``dataset``. The digest hashes the fields that pick the images
    (:data:`DATASET_FIELDS`); the source is ``data_dir`` when set, else lipsweep's name."""
    if not config.get("dataset"):
        return None
    from mlflow.data.code_dataset_source import CodeDatasetSource
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    picked = {k: config.get(k) for k in DATASET_FIELDS}
    digest = hashlib.sha256(json.dumps(picked, sort_keys=True, default=str).encode())
    source = None
    if config.get("data_dir"):
        try:
            source = resolve_dataset_source(redact_uri(str(config["data_dir"])))
        except Exception:  # noqa: BLE001 - no MLflow source type for it: named below
            source = None
    if source is None:
        source = CodeDatasetSource(
            {
                "lipsweep.dataset": str(config["dataset"]),
                "data_dir": redact_uri(str(config.get("data_dir") or "")),
            }
        )
    ds = MetaDataset(source, name=str(config["dataset"]), digest=digest.hexdigest()[:16])
    entity = ds._to_mlflow_entity()
    return {
        "name": entity.name,
        "digest": entity.digest,
        "source_type": entity.source_type,
        "source": entity.source,
    }
