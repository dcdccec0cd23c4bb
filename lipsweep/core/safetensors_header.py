"""Read and check a safetensors header without loading (or allocating) any tensor.

A thin layer over ``safetensors.safe_open``, which memory-maps the file and validates the
header before any tensor is read: bounded JSON, known dtypes (every one safetensors knows,
F8_E8M0 and F4 included), non-negative shapes, and offsets that tile the data section exactly
(overlaps, gaps, truncation and trailing bytes are refused). The loaders use this to refuse a
file before any allocation: shapes are compared with the model they are meant for. The
``numpy`` framework is asked for only so that reading a header never imports torch.
"""

from __future__ import annotations

import os

_PREFIX = "Error while deserializing header: "


class HeaderError(ValueError):
    """The file is not a well-formed safetensors file; ``field`` names what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


def read_header(path: str | os.PathLike) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``{name: (dtype, shape)}`` of the safetensors file at ``path``; nothing is loaded.

    Raises :class:`HeaderError` (field ``header``) with safetensors' own reason unless the
    file is a well-formed safetensors file."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(os.fspath(path), framework="numpy") as fh:
            out = {}
            for name in fh.keys():
                view = fh.get_slice(name)
                out[name] = (view.get_dtype(), tuple(view.get_shape()))
            return out
    except SafetensorError as exc:
        reason = str(exc).removeprefix(_PREFIX)[:200]
        raise HeaderError("header", f"{reason} (not a well-formed safetensors file)") from None
