"""Datasets: the family of datasets (``_registry``: each member's facts; ``datasets``: the
built-ins' sources), their settings (``config``), prepared copies on object stores
(``remote``), a researcher's own files (``sources``), and loading them into tensors
(``loading``); also the shipped CIFAR-10 sample (README.md). Bottom floor above ``core``:
imports nothing else of lipsweep."""

from lipsweep.data._registry import (
    DATASETS,
    DatasetSource,
    DatasetSpec,
    dataset_source,
    dataset_spec,
    is_dataset,
    list_datasets,
    register_dataset,
    unregister_dataset,
)

__all__ = [
    "DATASETS",
    "DatasetSource",
    "DatasetSpec",
    "dataset_source",
    "dataset_spec",
    "is_dataset",
    "list_datasets",
    "register_dataset",
    "unregister_dataset",
]

# Installed plugins add datasets too, read on the family's first use (core/registry.py).
DATASETS.use_entry_points("lipsweep.datasets")
