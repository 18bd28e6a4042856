"""Python side of mkernel's logging: records go through the Go core's zap
logger, so Go and Python lines share one level, one format and one stream.

The level comes from ``MKERNEL_LOG_LEVEL`` (read once by the Go core) and can
be changed at run time with :func:`set_log_level`.
"""

from __future__ import annotations

import logging

_PY_TO_ZAP = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warn",
    logging.ERROR: "error",
    logging.CRITICAL: "critical",
}
_ZAP_TO_PY = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
              "error": logging.ERROR, "dpanic": logging.CRITICAL, "panic": logging.CRITICAL,
              "fatal": logging.CRITICAL}


class _ZapHandler(logging.Handler):
    """Forwards a Python record to the Go logger (mkernel.<name>)."""

    def __init__(self, core) -> None:
        super().__init__()
        self._core = core

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level = _PY_TO_ZAP.get(record.levelno, "info" if record.levelno < logging.WARNING else "error")
            msg = record.getMessage()
            if record.exc_info:
                msg += "\n" + logging.Formatter().formatException(record.exc_info)
            self._core.Log(level, record.name, msg)
        except Exception:  # never let logging break the caller
            self.handleError(record)


_root = logging.getLogger("mkernel")


def install(core) -> None:
    """Route the ``mkernel`` Python logger into the Go core (called at import)."""
    if not any(isinstance(h, _ZapHandler) for h in _root.handlers):
        _root.addHandler(_ZapHandler(core))
    _root.propagate = False
    _root.setLevel(_ZAP_TO_PY.get(core.LogLevel(), logging.WARNING))


def set_log_level(level: str) -> None:
    """Set the level of every mkernel logger, Go and Python: debug, info, warn or error."""
    from ._native import core

    core.SetLogLevel(level)  # raises on an unknown name
    _root.setLevel(_ZAP_TO_PY.get(core.LogLevel(), logging.WARNING))


def get_logger(name: str) -> logging.Logger:
    """A child of the ``mkernel`` logger (``mkernel.<name>``)."""
    return _root.getChild(name)
