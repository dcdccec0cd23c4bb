"""An export as an MLflow model: a pyfunc "from code" that MLflow can load and serve.

MLflow keeps :mod:`lipsweep.tracking.pyfunc_model` as source and the export folder as the
``export`` artifact (safetensors + JSON), so nothing is pickled; loading it calls
:func:`lipsweep.load_exported`. The model holds what serving needs: lipsweep's Python code
(``code/lipsweep``, on ``sys.path`` when MLflow loads it), its pinned requirements
(:data:`PYFUNC_REQUIREMENTS`), its signature and an input example; not the project files of
the folder it was logged from (MLflow would copy a ``uv.lock`` and ``pyproject.toml`` found
there). MLflow's warnings while it saves come as ``lipsweep.tracking`` log lines, without
colour codes unless stderr is a terminal. :func:`log_export_model` logs it as an MLflow 3
LoggedModel on the trial's run (the run's Models tab), with the run's final metrics linked.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional

if TYPE_CHECKING:
    from lipsweep.tracking.writer import Tracker

_log = logging.getLogger("lipsweep.tracking")

PYFUNC_REQUIREMENTS = ("torch", "timm", "safetensors", "numpy", "pyyaml", "mlflow")
"""Pinned (installed versions) in the MLflow model's requirements: what the pyfunc and the
lipsweep code it carries import when they load an export."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NOT_FOR_USERS = re.compile(r"Add type hints to the `predict` method")
"""MLflow's advice to the pyfunc's author (its ``predict`` has no hint on purpose: MLflow
would validate by it), not news to whoever exports."""


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
            "register", f"MLflow refuses the model name {show(name)}: {exc.message}"
        ) from None
    if len(name) > MAX_MODEL_NAME:
        raise ConfigError(
            "register", f"a model name has at most {MAX_MODEL_NAME} characters, got {len(name)}"
        )


def save_pyfunc_model(
    folder: Path,
    dst: Path,
    img_size: int,
    num_classes: int,
    export_format: Optional[Any] = None,
    mlflow_model: Optional[Any] = None,
) -> Path:
    """Write an MLflow pyfunc model of the export ``folder`` to ``dst`` (a new folder).

    The signature is a float32 tensor (N, 3, img_size, img_size) in [0, 1] -> logits
    (N, num_classes). ``mlflow_model`` (an ``mlflow.models.Model``) carries the LoggedModel's
    id and run into ``MLmodel``."""
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
    example = np.full((1, 3, img_size, img_size), 0.5, dtype=np.float32)  # [0, 1] pixels
    with tempfile.TemporaryDirectory() as tmp, _mlflow_saving():
        mlflow.pyfunc.save_model(
            str(dst),
            python_model=str(code),
            artifacts={"export": str(folder)},
            code_paths=[str(package_code(Path(tmp)))],
            signature=signature,
            input_example=example,
            pip_requirements=[f"{p}=={version(p)}" for p in PYFUNC_REQUIREMENTS],
            metadata={"lipsweep_format": export_format, "input_range": [0.0, 1.0]},
            mlflow_model=mlflow_model,
        )
    return Path(dst)


def package_code(dst: Path) -> Path:
    """lipsweep's Python files (not its data, spaces or configs) copied to ``dst/lipsweep``:
    the loader the model carries."""
    src = Path(__file__).resolve().parents[1]  # lipsweep/

    def skip(folder: str, names: list[str]) -> list[str]:
        keep = (".py", "py.typed")
        return [
            n
            for n in names
            if n == "__pycache__" or (not (Path(folder) / n).is_dir() and not n.endswith(keep))
        ]

    return Path(shutil.copytree(src, dst / "lipsweep", ignore=skip))


@contextlib.contextmanager
def _mlflow_saving() -> Iterator[None]:
    """While MLflow saves a model: no uv project files of the working folder copied into it
    (``MLFLOW_UV_AUTO_DETECT``), and its warnings as log lines, colour codes removed unless
    stderr is a terminal."""
    before = os.environ.get("MLFLOW_UV_AUTO_DETECT")
    os.environ["MLFLOW_UV_AUTO_DETECT"] = "false"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # MLflow sets its own filters inside: sifted below
            yield
    finally:
        if before is None:
            os.environ.pop("MLFLOW_UV_AUTO_DETECT", None)
        else:
            os.environ["MLFLOW_UV_AUTO_DETECT"] = before
    tty = sys.stderr.isatty()
    for w in caught:
        text = str(w.message)
        if not _NOT_FOR_USERS.search(text):
            _log.warning("MLflow: %s", text if tty else _ANSI.sub("", text))


LOGGED_MODEL_NAME = "model"
"""Name of the LoggedModel on its run (the run's Models tab lists it)."""


@dataclass(frozen=True)
class LoggedExport:
    """An export logged as an MLflow 3 LoggedModel on the trial run it came from."""

    model_id: str
    run_id: str
    artifact_location: str
    """Where MLflow keeps the model's files (``MLmodel``, the code, the export folder)."""
    metrics: tuple[str, ...]
    """The run's metrics linked to the model (their final values)."""

    @property
    def uri(self) -> str:
        """``models:/<model_id>``, which ``mlflow.pyfunc.load_model`` accepts."""
        return f"models:/{self.model_id}"


def log_export_model(
    tracker: Tracker,
    run_id: str,
    folder: Path,
    img_size: int,
    num_classes: int,
    export_format: Optional[Any] = None,
) -> LoggedExport:
    """Log the export ``folder`` as an MLflow 3 LoggedModel whose source run is ``run_id``
    (the trial it was exported from): the pyfunc of :func:`save_pyfunc_model` as its
    artifacts, the run's params as its params, the final value of each of the run's metrics
    linked to it (re-logged with ``model_id``: same value, step and timestamp, so the run's
    histories gain no point), and the run's output. It ends READY, or FAILED if a step
    failed (the error is raised)."""
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus
    from mlflow.models import Model

    client = tracker.client
    run = tracker.get_run(run_id)
    model = tracker._call(
        "create_logged_model",
        lambda: client.create_logged_model(
            run.info.experiment_id,
            name=LOGGED_MODEL_NAME,
            source_run_id=run_id,
            params=dict(run.data.params),
        ),
    )
    model_id = model.model_id
    try:
        with tempfile.TemporaryDirectory() as tmp:
            mlflow_model = Model(
                artifact_path=model.artifact_location,
                model_uuid=model_id,
                run_id=run_id,
                model_id=model_id,
            )
            dst = save_pyfunc_model(
                folder, Path(tmp) / "model", img_size, num_classes, export_format, mlflow_model
            )
            tracker._call(
                "log_model_artifacts", lambda: client.log_model_artifacts(model_id, str(dst))
            )
        linked, step = _link_final_metrics(tracker, run_id, list(run.data.metrics), model_id)
        tracker._call(
            "log_outputs",
            lambda: client.log_outputs(run_id, [LoggedModelOutput(model_id, step)]),
        )
        tracker._call(
            "finalize_logged_model",
            lambda: client.finalize_logged_model(model_id, LoggedModelStatus.READY),
        )
    except BaseException:
        try:
            client.finalize_logged_model(model_id, LoggedModelStatus.FAILED)
        except Exception as err:  # the first error is the one to report
            _log.warning("could not mark logged model %s FAILED: %s", model_id, err)
        raise
    _log.info("logged model %s on run %s (%d metrics linked)", model_id, run_id, len(linked))
    return LoggedExport(model_id, run_id, model.artifact_location, tuple(linked))


def _link_final_metrics(
    tracker: Tracker, run_id: str, keys: list[str], model_id: str
) -> tuple[list[str], int]:
    """Link the final entry of each metric ``keys`` of the run to ``model_id``; returns the
    keys linked and the highest step among them (the step the model was logged at)."""
    from mlflow.entities import Metric

    finals = []
    for key in sorted(keys):
        history = tracker.get_metric_history(run_id, key)
        if history:  # the run's "latest": highest (step, timestamp, value), as MLflow orders
            m = max(history, key=lambda h: (h.step, h.timestamp, h.value))
            finals.append(Metric(key, m.value, m.timestamp, m.step, model_id=model_id))
    for i in range(0, len(finals), 500):
        batch = finals[i : i + 500]
        tracker._call("log_batch", lambda b=batch: tracker.client.log_batch(run_id, metrics=b))
    return [m.key for m in finals], max((m.step for m in finals), default=0)
