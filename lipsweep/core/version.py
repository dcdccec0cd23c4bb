"""lipsweep's version, written once (``lipsweep.__version__`` and provenance tags read it)."""

__version__ = "0.1.0"
