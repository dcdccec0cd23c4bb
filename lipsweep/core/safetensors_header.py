"""Read and check a safetensors header without loading (or allocating) any tensor.

The format: 8 bytes little-endian header length ``N``, ``N`` bytes of JSON mapping each tensor
name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (plus optional ``__metadata__``),
then the raw data. The loaders use this to refuse a file before any allocation: shapes are
compared with the model they are meant for, and offsets with the file's real size.
"""

from __future__ import annotations

import json
import math
import struct
from typing import IO, Any

MAX_HEADER_BYTES = 100 * 2**20
"""safetensors' own limit on the JSON header."""

DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


class HeaderError(ValueError):
    """The file is not a well-formed safetensors file; ``field`` names what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


def read_header(fh: IO[bytes], file_size: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``{name: (dtype, shape)}`` of an open safetensors file of ``file_size`` bytes.

    Raises :class:`HeaderError` unless the header is bounded JSON whose entries have known
    dtypes, non-negative integer shapes and offsets that tile the data section exactly."""
    if file_size < 8:
        raise HeaderError("header", f"file of {file_size} bytes is too short for safetensors")
    (n,) = struct.unpack("<Q", fh.read(8))
    if n > min(MAX_HEADER_BYTES, file_size - 8):
        raise HeaderError(
            "header",
            f"header length {n:,} exceeds the file or "
            f"{MAX_HEADER_BYTES:,} bytes (not a safetensors file)",
        )
    try:
        doc = json.loads(fh.read(n).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise HeaderError("header", "is not JSON (not a safetensors file)") from None
    if not isinstance(doc, dict):
        raise HeaderError("header", "is not a JSON object (not a safetensors file)")
    data_size = file_size - 8 - n
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    spans = []
    for name, entry in doc.items():
        if name == "__metadata__":
            continue
        out[name] = _entry(name, entry)
        begin, end = entry["data_offsets"]
        need = math.prod(out[name][1]) * DTYPE_BYTES[out[name][0]]
        if not 0 <= begin <= end <= data_size or end - begin != need:
            raise HeaderError(
                f"tensor {name[:80]!r}",
                f"data_offsets {[begin, end]} do not "
                f"hold {need:,} bytes inside the {data_size:,}-byte data section",
            )
        spans.append((begin, end))
    spans.sort()
    if any(a[1] > b[0] for a, b in zip(spans, spans[1:])):
        raise HeaderError("header", "tensors overlap")
    if max((end for _, end in spans), default=0) != data_size:
        raise HeaderError(
            "header", f"the tensors do not end where the file does ({data_size:,} data bytes)"
        )
    return out


def _entry(name: str, entry: Any) -> tuple[str, tuple[int, ...]]:
    where = f"tensor {name[:80]!r}"
    if not isinstance(entry, dict):
        raise HeaderError(where, "entry is not a JSON object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        raise HeaderError(where, f"unknown dtype {str(dtype)[:20]!r}")
    if (
        not isinstance(shape, list)
        or len(shape) > 8
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise HeaderError(where, "shape is not a list of at most 8 non-negative integers")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise HeaderError(where, "data_offsets is not two integers")
    return dtype, tuple(shape)
