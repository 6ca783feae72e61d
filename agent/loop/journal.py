"""Where a run reports: structured JSON events in the run folder's events.log (structlog), and short
progress lines for people on the terminal (stderr, so stdout keeps only the final table). Both pass through
agent/loop/redact.py first, so no secret an endpoint echoes reaches either.

Events emitted before the run folder exists (while the policy is being set up) are kept and written
when the journal is attached to the folder's events.log.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any, TextIO

import structlog

from agent.loop.redact import redact
from agent.loop.writes import open_inside


class Journal:
    def __init__(self, run_id: str, quiet: bool = False):
        """`quiet`: no terminal lines (runs driven by agent.bench, which shows one progress bar instead)."""
        self.quiet = quiet
        self._buffer = io.StringIO()
        self._sink: TextIO = self._buffer
        processors = [
            lambda _logger, _name, event: redact(event),
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(),
        ]
        self._log = structlog.wrap_logger(structlog.WriteLogger(self), processors=processors).bind(run_id=run_id)

    def attach(self, events_path: Path) -> None:
        """Write events to `events_path` from now on (appending: a resumed run continues the file); once."""
        if self._sink is not self._buffer:
            return
        sink = open_inside(events_path, "a", encoding="utf-8")  # closed by close(); lives as long as the run
        sink.write(self._buffer.getvalue())
        sink.flush()
        self._sink = sink

    def event(self, name: str, **fields: Any) -> None:
        """One JSON line in events.log, flushed at once so a killed run keeps its events."""
        self._log.info(name, **fields)

    def say(self, text: str) -> None:
        if not self.quiet:
            print(redact(text), file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._sink is not self._buffer:
            self._sink.close()

    # structlog.WriteLogger's file protocol
    def write(self, text: str) -> None:
        self._sink.write(text)

    def flush(self) -> None:
        self._sink.flush()
