"""What every evaluation pool is, whichever backend holds its GPUs (this machine's, or Dask workers on GPU hosts):
a `Gpu` that many runs share, that can say where its evaluations stand and be stopped under them; and the one
parse of an `eval.pool` value."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from typing import Protocol

from tools.extras import pip_command
from tools.gpu.base import Gpu

LOCAL = "local"
OFF = "turned off (eval.gpu=false)"
# A Dask scheduler's address: dask:// is ours (plain TCP), tcp:// what `dask scheduler` prints, tls:// with
# certificates; the host a name or an IPv4 address, or an IPv6 one in brackets.
ADDRESS = re.compile(
    r"(?P<scheme>dask|tcp|tls)://(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]):(?P<port>\d{1,5})"
)


class Interrupted(RuntimeError):
    """An attempt's GPU stages were cut short by something other than its kernel (the pool was stopped, a worker or
    its host was lost, the scheduler could not be reached): the result is not the kernel's verdict, so the turn must
    not be recorded; the run resumes it later."""


@dataclass(frozen=True)
class Load:
    """The evaluations one GPU of a pool holds right now."""

    arch: str  # what it runs ('?' when it is neither Hopper nor Blackwell)
    host: str  # 'local', or the Dask worker's host
    running: int
    queued: int


class Pool(Gpu, Protocol):
    def describe(self) -> str:
        """Where the GPU stages go, in a line (a bench prints it first)."""
        ...

    def load(self) -> list[Load]:
        """Per GPU, what it is running and holds queued; nothing when that cannot be told."""
        ...

    def interrupt(self) -> None:
        """Stop now: evaluations in flight raise Interrupted instead of returning."""
        ...


def scheduler_address(pool: str) -> str | None:
    """The Dask scheduler address an `eval.pool` value names (dask://H:P reads as tcp://H:P), or None for 'local';
    ValueError says what is accepted, or what to install."""
    if pool == LOCAL:
        return None
    match = ADDRESS.fullmatch(pool)
    if match is None or not 0 < int(match["port"]) < 65536:
        raise ValueError(f"{pool!r} is not a pool: use local, dask://HOST:PORT, tcp://HOST:PORT or tls://HOST:PORT")
    if importlib.util.find_spec("distributed") is None:
        raise ValueError(f"{pool!r} needs the dask extra (distributed is not installed): {pip_command('dask')}")
    scheme = "tcp" if match["scheme"] == "dask" else match["scheme"]
    return f"{scheme}://{match['host']}:{match['port']}"
