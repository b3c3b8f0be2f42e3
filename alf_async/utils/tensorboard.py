"""TensorBoard's writer as the run's metrics use it: open it knowing its event
file, and keep the traceback of its writer thread off the console.

TensorBoard writes event files from a background thread; when a write fails
(no space left on the device), that thread ends on the ``OSError`` and the
writer raises it on the caller's thread at the next write or at ``close``, where
``metrics.MetricsRecorder`` reports it naming the event file.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Optional, Tuple

from alf_async.utils.files import with_filename

logger = logging.getLogger("alf_async")

_TENSORBOARD_THREAD_MODULE = "tensorboard.summary.writer"
_quiet_hook_installed = False


def open_tensorboard(directory: str, purge_step: Optional[int]) -> Tuple[Any, str]:
    """A ``SummaryWriter`` on ``directory`` and the path of its event file.

    Raises ``OSError`` naming ``directory`` if the writer cannot start.
    """
    from torch.utils.tensorboard import SummaryWriter

    _quiet_tensorboard_thread_errors()
    before = set(os.listdir(directory)) if os.path.isdir(directory) else set()
    try:
        writer = SummaryWriter(directory, purge_step=purge_step)
    except OSError as e:
        raise with_filename(e, directory) from None
    new = sorted(name for name in os.listdir(directory)
                 if name.startswith("events.out.tfevents.") and name not in before)
    return writer, os.path.join(directory, new[-1]) if new else directory


def _quiet_tensorboard_thread_errors() -> None:
    """Stop Python printing the traceback of a TensorBoard writer thread that
    ends on an ``OSError`` (e.g. no space left on the device).

    TensorBoard's thread keeps its error and the writer raises it on the
    trainer's thread at the next write or at close, where ``MetricsRecorder``
    reports it naming the event file; the thread's traceback would only add a
    second, out-of-place report. Other threads and errors keep the previous
    ``threading.excepthook``. Installed once per process.
    """
    global _quiet_hook_installed
    if _quiet_hook_installed:
        return
    previous = threading.excepthook

    def hook(args: "threading.ExceptHookArgs") -> None:
        if (args.exc_type is not None and issubclass(args.exc_type, OSError)
                and type(args.thread).__module__.startswith(_TENSORBOARD_THREAD_MODULE)):
            logger.debug("TensorBoard's writer thread ended: %s (raised at the next "
                         "write)", args.exc_value)
            return
        previous(args)

    threading.excepthook = hook
    _quiet_hook_installed = True
