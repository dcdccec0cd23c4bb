"""SHA-256 of large files, streamed: a checkpoint's files, a staged ``pretrained`` weights
file, a prepared dataset. Light: hashlib only."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO, Optional, Union

CHUNK = 1 << 20
"""Bytes read at a time (a ViT-B optimizer state is ~700 MB: never read whole)."""


def stream_sha256(stream: BinaryIO, sink: Optional[BinaryIO] = None) -> str:
    """The SHA-256 (hex) of what ``stream`` holds from where it stands, read :data:`CHUNK`
    bytes at a time, each chunk also written to ``sink`` when one is given (a copy verified
    in one pass). Any object with ``read(n)`` returning bytes will do (a file, a pyarrow
    stream)."""
    digest = hashlib.sha256()
    while chunk := stream.read(CHUNK):
        digest.update(chunk)
        if sink is not None:
            sink.write(chunk)
    return digest.hexdigest()


def file_sha256(path: Union[str, Path]) -> str:
    """The SHA-256 (hex) of the local file ``path``."""
    with open(path, "rb") as fh:
        return stream_sha256(fh)
