"""How lipsweep's log lines look, from the command line and from Python.

The CLI configures the root logger with :data:`LOG_FORMAT` (``12:00:01 INFO
lipsweep.sweep: ...``). From Python (:mod:`lipsweep.api`), :func:`show_info_lines` shows
lipsweep's INFO lines the same way on stderr, but only while nobody has configured logging:
once the root logger or the ``lipsweep`` logger has a handler of the user's, the user's
configuration decides, and lipsweep's own handler is gone. Torch-, Ray- and MLflow-free.
"""

from __future__ import annotations

import logging
import sys

from lipsweep.core.redact import redact_uri

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"
LOGGER = "lipsweep"


def redact_record(record: logging.LogRecord) -> bool:
    """A logging filter: no credential of a URI (userinfo or query) in any log line."""
    text = record.getMessage()
    shown = redact_uri(text)
    if shown != text:
        record.msg, record.args = shown, None
    return True


class _ApiHandler(logging.StreamHandler):
    """lipsweep's lines on ``sys.stderr`` as it is at each line (a notebook or a test may
    replace it), while the root logger has no handler."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(LOG_FORMAT, DATE_FORMAT))
        self.addFilter(redact_record)
        self.addFilter(lambda record: not logging.getLogger().handlers)

    @property  # type: ignore[override]
    def stream(self):  # noqa: D401 - StreamHandler's attribute
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ sets it
        pass


_set_level = False
"""Whether :func:`show_info_lines` set the ``lipsweep`` logger's level (and may unset it)."""


def show_info_lines() -> None:
    """Show lipsweep's INFO lines on stderr as the CLI does, unless logging is configured.

    Called by every :mod:`lipsweep.api` function. When neither the root logger nor the
    ``lipsweep`` logger has a handler of someone else's, it adds one handler to ``lipsweep``
    (and sets its level to INFO if it has none); otherwise it removes its own, if an earlier
    call added it, and leaves everything as the user set it."""
    global _set_level
    lib = logging.getLogger(LOGGER)
    ours = [h for h in lib.handlers if isinstance(h, _ApiHandler)]
    theirs = len(lib.handlers) > len(ours) or bool(logging.getLogger().handlers)
    if theirs:
        for handler in ours:
            lib.removeHandler(handler)
        if _set_level and lib.level == logging.INFO:
            lib.setLevel(logging.NOTSET)
        _set_level = False
        return
    if not ours:
        lib.addHandler(_ApiHandler())
    if lib.level == logging.NOTSET:
        lib.setLevel(logging.INFO)
        _set_level = True
