"""The checkpoints' serializer: a checkpoint loads only what the loop itself writes there.

LangGraph's default serializer rebuilds any object a checkpoint names: a msgpack extension value carrying
("os", "system", CMD) is imported and called when the run is resumed, so a run folder someone sends you could
run anything. The loop's state is plain JSON (state.py), so a checkpoint of ours holds no such value but
LangGraph's own control types; anything else stops the load with one line, before a name is imported.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from agent.loop.store import RunFolderError

# The (module, name) pairs LangGraph itself may write into a checkpoint of our graph (its routing values).
ALLOWED_TYPES = frozenset(
    {("langgraph.types", "Send"), ("langgraph.types", "Command"), ("langgraph.types", "Interrupt")}
)
WRITTEN_FORMATS = frozenset({"null", "bytes", "bytearray", "msgpack"})  # what dumps_typed writes (no json, no pickle)
_NAMED = frozenset(range(6))  # extension codes whose payload names a (module, name) to rebuild (jsonplus.py)
_WRAPPER = 7  # a delta snapshot: only wraps another value


class UntrustedCheckpoint(RunFolderError):
    """A checkpoint holds a value the loop never writes; nothing in it was imported or called."""


class LoopSerializer(JsonPlusSerializer):
    """JsonPlusSerializer that refuses, before decoding, any value naming a type outside ALLOWED_TYPES."""

    def __init__(self) -> None:
        super().__init__(allowed_msgpack_modules=tuple(ALLOWED_TYPES))

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        check_value(*data)
        return super().loads_typed(data)


def check_value(format_: str, payload: bytes) -> None:
    """Raise UntrustedCheckpoint unless this stored value holds only plain data and ALLOWED_TYPES."""
    if format_ not in WRITTEN_FORMATS:
        raise UntrustedCheckpoint(f"a value stored as {format_!r}, which the loop never writes")
    if format_ != "msgpack":
        return
    refused: list[str] = []  # ormsgpack hides what its ext_hook raised behind "ext_hook failed": say it here

    def inspect(code: int, data: bytes) -> None:
        inner = ormsgpack.unpackb(data, ext_hook=inspect, option=ormsgpack.OPT_NON_STR_KEYS)
        if code == _WRAPPER:
            return
        named = code in _NAMED and isinstance(inner, list | tuple) and len(inner) >= 2
        key = (str(inner[0]), str(inner[1])) if named else None
        if key not in ALLOWED_TYPES:
            refused.append(f"the type {key[0]}.{key[1]}"[:200] if key else f"msgpack extension {code}")
            raise UntrustedCheckpoint(refused[0])

    try:
        ormsgpack.unpackb(payload, ext_hook=inspect, option=ormsgpack.OPT_NON_STR_KEYS)
    except ValueError:
        if refused:
            raise UntrustedCheckpoint(f"a value of {refused[0]}, which the loop never writes") from None
        raise


def check_database(path: Path) -> None:
    """Every value in a checkpoint database, read without changing it and without rebuilding anything; a
    refusal names the file and the first value refused."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            queries = [q for t, q in (("checkpoints", "SELECT type, checkpoint FROM checkpoints"),
                                      ("writes", "SELECT type, value FROM writes")) if t in tables]  # fmt: skip
            for query in queries:
                for format_, payload in db.execute(query):
                    check_value(str(format_), payload or b"")
    except sqlite3.DatabaseError as e:
        raise RunFolderError(f"{path} is not a readable checkpoint database ({e})") from None
    except UntrustedCheckpoint as e:
        raise UntrustedCheckpoint(f"{path} holds {e}: refusing to resume it (nothing was loaded)") from None
    except ValueError as e:  # ormsgpack's decoding errors
        raise RunFolderError(f"{path} holds a value that is not msgpack ({' '.join(str(e).split())[:200]})") from None
