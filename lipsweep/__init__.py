"""lipsweep: distributed sweeps of attention regularizers for robust Vision Transformers."""
from __future__ import annotations

__version__ = "0.1.0"
