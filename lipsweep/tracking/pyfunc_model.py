"""The MLflow pyfunc of a lipsweep export, logged as "models from code" (no pickled object).

MLflow copies this file into the model and runs it at load time; :func:`mlflow.models.set_model`
below names the model. Its one artifact, ``export``, is the export folder
(``model.safetensors`` + ``config.json``), rebuilt by :func:`lipsweep.load_exported`, so
``predict`` maps [0, 1] RGB images (N, 3, H, W) to logits (N, classes) exactly as the export
does (docs/contract.md). The model carries lipsweep's code (``code/lipsweep``, which MLflow
puts on ``sys.path``), so serving needs only the model's own requirements.
"""

from __future__ import annotations

from typing import Any, Optional

import mlflow
import numpy as np
from mlflow.pyfunc import PythonModel

ARTIFACT = "export"
"""Key of the export folder in the model's artifacts
(:func:`lipsweep.tracking.model.save_pyfunc_model`)."""


class LipsweepExport(PythonModel):
    """[0, 1] pixels (N, 3, H, W) -> logits (N, classes), via :func:`lipsweep.load_exported`."""

    def load_context(self, context: Any) -> None:
        from lipsweep.vit.export_format import load_exported

        self.model = load_exported(context.artifacts[ARTIFACT])

    def predict(
        self,
        context: Any,
        model_input,  # no hint: MLflow would validate by it
        params: Optional[dict[str, Any]] = None,
    ) -> np.ndarray:
        import torch

        if hasattr(model_input, "to_numpy"):  # a DataFrame of one array column
            model_input = np.stack([np.asarray(v) for v in model_input.iloc[:, 0]])
        x = torch.as_tensor(np.asarray(model_input, dtype=np.float32))
        with torch.no_grad():
            return self.model(x).numpy()


mlflow.models.set_model(LipsweepExport())
