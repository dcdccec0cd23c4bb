"""lipsweep: distributed sweeps of attention regularizers for robust Vision Transformers.

``import lipsweep`` stays light (no torch, Ray or MLflow); the public names load on first use.
"""

from __future__ import annotations

from typing import Any

from lipsweep.core.version import __version__

__all__ = ["load_exported", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "load_exported":
        from lipsweep.vit.export_format import load_exported

        return load_exported
    raise AttributeError(f"module 'lipsweep' has no attribute {name!r}")
