"""An export as an MLflow model: a pyfunc "from code" that MLflow can load and serve.

MLflow keeps :mod:`lipsweep.tracking.pyfunc_model` as source and the export folder as the
``export`` artifact (safetensors + JSON), so nothing is pickled; loading it calls
:func:`lipsweep.load_exported`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

PYFUNC_REQUIREMENTS = ("torch", "timm", "safetensors", "numpy", "mlflow")
"""Pinned (installed versions) in the MLflow model's requirements; lipsweep itself must be
installed where the model is served (``--env-manager local``)."""


MAX_MODEL_NAME = 256  # the registry's name column (String(256) in MLflow's SQL stores)


def check_model_name(name: str) -> None:
    """A registered-model name MLflow accepts (its own rule: not blank, no '/' or ':', a
    plain path; plus the SQL column's length), else ConfigError naming ``--register``."""
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import _validate_model_name

    from lipsweep.core.config_base import ConfigError, show

    try:
        _validate_model_name(name)
    except MlflowException as exc:
        raise ConfigError(
            "--register", f"MLflow refuses the model name {show(name)}: {exc.message}"
        ) from None
    if len(name) > MAX_MODEL_NAME:
        raise ConfigError(
            "--register", f"a model name has at most {MAX_MODEL_NAME} characters, got {len(name)}"
        )


def save_pyfunc_model(
    folder: Path, dst: Path, img_size: int, num_classes: int, export_format: Optional[Any] = None
) -> Path:
    """Write an MLflow pyfunc model of the export ``folder`` to ``dst`` (a new folder).

    The signature is a float32 tensor (N, 3, img_size, img_size) in [0, 1] -> logits
    (N, num_classes)."""
    from importlib.metadata import version
    from importlib.util import find_spec

    import mlflow.pyfunc
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    code = find_spec("lipsweep.tracking.pyfunc_model").origin  # its file; MLflow runs it
    signature = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.float32), (-1, 3, img_size, img_size))]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, num_classes))]),
    )
    mlflow.pyfunc.save_model(
        str(dst),
        python_model=str(code),
        artifacts={"export": str(folder)},
        signature=signature,
        pip_requirements=[f"{p}=={version(p)}" for p in PYFUNC_REQUIREMENTS],
        metadata={"lipsweep_format": export_format, "input_range": [0.0, 1.0]},
    )
    return Path(dst)
