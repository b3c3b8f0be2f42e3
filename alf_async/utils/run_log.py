"""The "alf_async" logger of a run: INFO lines to stderr and to
``<root_dir>/log.txt``, set up the same way by the train command and the Python
API (``alf_async.train``)."""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional


class RunLogFileHandler(logging.FileHandler):
    """``<root_dir>/log.txt``: a file handler that, when a line cannot be written
    (no space left on the device, ...), says so once on stderr in one line and
    stops writing the file, instead of printing a traceback for every line.
    The lines still reach stderr through the stream handler."""

    def __init__(self, filename: str):
        super().__init__(filename)
        self.failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.failed:
            super().emit(record)

    def flush(self) -> None:
        if not self.failed:
            super().flush()

    def close(self) -> None:
        try:
            super().close()
        except OSError:
            if not self.failed:  # the failure was not reported yet
                raise

    def handleError(self, record: logging.LogRecord) -> None:
        if self.failed:
            return
        self.failed = True
        error = sys.exc_info()[1]
        reason = (getattr(error, "strerror", None) or error) if error else "unknown error"
        print(f"alf_async: warning: could not write {self.baseFilename}: {reason}; "
              "log lines go to stderr only from now on", file=sys.stderr, flush=True)


def setup_logging(root_dir: Optional[str]) -> logging.Logger:
    """Log INFO to stderr and, with a run directory, to <root_dir>/log.txt
    (``RunLogFileHandler``: a failed write of it is one warning, not a traceback)."""
    logger = logging.getLogger("alf_async")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(fmt)
    logger.addHandler(stream)
    if root_dir:
        os.makedirs(root_dir, exist_ok=True)
        file_handler = RunLogFileHandler(os.path.join(root_dir, "log.txt"))
        file_handler.setFormatter(fmt)
        logger.addHandler(file_handler)
    return logger
