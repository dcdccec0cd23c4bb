"""A closed stdout never kills the work: ``lipsweep sweep ... | head -1``.

Python ignores SIGPIPE, so a write to a pipe whose reader has gone raises
``BrokenPipeError``; in a sweep that traceback killed the driver and left its runs RUNNING.
The convention of command-line tools is to stop writing to the closed stream and carry on:
:class:`ReaderGoneSafe` wraps ``sys.stdout`` (and ``sys.stderr``) so that, from the first
broken write on, output to that stream is dropped, the log says so once (on stderr, while it
is open), and the stream's file descriptor is pointed at ``/dev/null`` so that the
interpreter's last flush at exit cannot fail either. Torch-, Ray- and MLflow-free.
"""

from __future__ import annotations

import io
import logging
import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator, TextIO

_log = logging.getLogger("lipsweep")


class ReaderGoneSafe:
    """A text stream that turns a vanished reader (EPIPE) into silence instead of an error."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream = stream
        self._name = name
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.reader_gone = True  # first: the log line below may go to this very stream
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, io.UnsupportedOperation):
            pass
        _log.warning(
            "%s was closed by its reader (e.g. `| head`); carrying on without it, the log goes on",
            self._name,
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def reader_gone_safe() -> Iterator[None]:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in :class:`ReaderGoneSafe` for the block."""
    saved = sys.stdout, sys.stderr
    sys.stdout = ReaderGoneSafe(sys.stdout, "stdout")  # type: ignore[assignment]
    sys.stderr = ReaderGoneSafe(sys.stderr, "stderr")  # type: ignore[assignment]
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):  # what is still buffered, while wrapped
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        sys.stdout, sys.stderr = saved
