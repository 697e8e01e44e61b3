"""JSON-lines logs for operators (the gateway's access and audit logs, the engine's request log): one line per event
on stdout, written by a thread of its own, so an event loop never waits on a slow terminal or a full pipe.

Each log is a named logger (`sluicegate.access`, `sluicegate.audit`, `sluicegate.engine.requests`) whose lines are
finished JSON strings, written through `JsonLines(name).write(line)`. `to_stdout(name)` routes the logger to stdout:
it gets a QueueHandler onto the writer thread's queue and stops propagating (so the root logger's human-readable
handler does not print the line a second time). While that handler is the logger's only one, `write` puts the line
on the queue itself: no LogRecord is made, which is most of what logging costs a caller (about half of it is the
QueueHandler's copy of the record). A logger that has another handler (the embedding program's logging config, or a
test's) gets every line as an ordinary INFO record instead, whatever level the rest of the process logs at.
"""

from __future__ import annotations

import atexit
import logging
import queue
import sys
import threading
import time
from logging.handlers import QueueHandler

WRITER_JOIN_TIMEOUT_S = 2.0
"""At exit, how long the lines still queued get to reach stdout."""
BATCH_WINDOW_S = 0.05
"""After a line wakes the writer, how long it waits for more before writing them all: under load the writer wakes
(and takes the GIL from the event loop) once per window instead of once per request, which cost the gateway ~10%
of its CPU per request (`sluicegate bench gateway`); a line reaches stdout at most this much later."""

_lock = threading.Lock()
_queue: queue.SimpleQueue[str | logging.LogRecord | threading.Event | None] = queue.SimpleQueue()
_writer: threading.Thread | None = None
_handlers: dict[str, QueueHandler] = {}
"""Logger name -> the handler `to_stdout` gave it."""


def json_logger(name: str) -> logging.Logger:
    """The named logger at INFO: its lines are written whatever level the process logs others at (--log-level)."""
    logger = logging.getLogger(name)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    return logger


class JsonLines:
    """One JSON-lines log. `write` takes a finished line (json.dumps of one object, no newline)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.logger = json_logger(name)

    def write(self, line: str) -> None:
        handlers = self.logger.handlers
        if len(handlers) == 1 and handlers[0] is _handlers.get(self.name):
            if self.logger.isEnabledFor(logging.INFO):  # a level raised to silence it still does
                _queue.put_nowait(line)
        else:
            self.logger.info(line)


def to_stdout(name: str) -> None:
    """Route logger `name` to stdout through the writer thread (started on first use; idempotent). A logger that
    already has a handler is left as it is: the program decided where it goes."""
    global _writer
    logger = json_logger(name)
    with _lock:
        if logger.handlers:
            return
        if _writer is None:
            _writer = threading.Thread(target=_drain, name="sluicegate-json-logs", daemon=True)
            _writer.start()
            atexit.register(_stop)
        handler = _handlers[name] = QueueHandler(_queue)
        logger.addHandler(handler)
        logger.propagate = False


def _drain() -> None:
    """The writer thread: every line queued so far, then one flush (a burst of requests costs one write call)."""
    while True:
        items = [_queue.get()]
        if items[-1] is not None:
            time.sleep(BATCH_WINDOW_S)
        while not _queue.empty() and items[-1] is not None:
            items.append(_queue.get_nowait())
        text = "".join(
            (item if isinstance(item, str) else item.getMessage()) + "\n"
            for item in items
            if isinstance(item, (str, logging.LogRecord))
        )
        # The process's own stdout, not whatever sys.stdout is at the moment: code that swaps sys.stdout to capture
        # its own output (a CLI run in-process, a test) must not find the gateway's log lines in it.
        stdout = sys.__stdout__
        try:
            if stdout is not None:
                stdout.write(text)
                stdout.flush()
        except (OSError, ValueError):  # stdout closed or gone: the lines are lost, the process goes on
            pass
        for item in items:
            if isinstance(item, threading.Event):  # flush(): every line queued before it is written
                item.set()
        if items[-1] is None:
            return


def flush(timeout_s: float = WRITER_JOIN_TIMEOUT_S) -> None:
    """Wait until every line queued so far is on stdout. A process ended by a signal loses what atexit would have
    written (uvicorn re-raises the SIGTERM it handled once the server has shut down), so a server flushes first."""
    if _writer is None:
        return
    written = threading.Event()
    _queue.put_nowait(written)
    written.wait(timeout_s)


def _stop() -> None:
    global _writer
    with _lock:
        writer, _writer = _writer, None
    if writer is not None:
        _queue.put_nowait(None)
        writer.join(WRITER_JOIN_TIMEOUT_S)
