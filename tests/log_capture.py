"""Capture the lines a named logger writes (the JSON-lines logs stop propagating, so pytest's caplog never sees
them): a real logging.Handler added beside whatever handlers the logger has."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def records(self) -> list[dict]:
        """Every line as the JSON object it must be."""
        return [json.loads(line) for line in list(self.lines)]


@contextlib.contextmanager
def captured(*names: str, level: int | None = None) -> Iterator[Lines]:
    """Lines written to any of `names` ("" is the root logger) while the block runs; `level`: lower the loggers'
    level meanwhile (to catch debug lines too)."""
    lines = Lines()
    loggers = [logging.getLogger(name or None) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(lines)
        if level is not None:
            logger.setLevel(level)
    try:
        yield lines
    finally:
        for logger, old in zip(loggers, levels, strict=True):
            logger.removeHandler(lines)
            logger.setLevel(old)
