"""Datasets: their settings (``config``), where images come from (``sources``, ``remote``),
and loading them into tensors (``loading``); also the shipped CIFAR-10 sample (README.md).
Bottom floor above ``core``: imports nothing else of lipsweep."""
