"""Starting the child processes the harness runs (ptxas, nvdisasm, the NVRTC child, the GPU worker, ncu and
compute-sanitizer): every child dies with its parent, a tool can be given a memory cap, and what a process of
ours killed with -9 left behind (its temp files, children that outlived it) is swept at the next start.

Linux's parent-death signal fires when the *thread* that forked the child exits, not the process: a child
forked by a short-lived thread (agent.bench runs each run in one) would be killed under a live parent. So
every child is forked by one long-lived spawner thread, which lives as long as the process.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import queue
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TEMP_PREFIX = "ptxbench-"
OWNER_ENV = "PTXBENCH_OWNER"  # the pid of the process that started a child: the sweep finds orphans by it
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def temp_prefix(kind: str) -> str:
    """A temp file or folder name prefix that names this process, so the sweep can tell whose it is."""
    return f"{TEMP_PREFIX}{os.getpid()}-{kind}-"


def die_with_parent(parent: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent (thread) exits; exit now if it already has.
    Called in a forked child before exec, and by our Python children that others start (the launcher)."""
    if _LIBC is None:
        return
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died between fork and prctl: the signal will never come
        os._exit(1)


def _child_setup(parent: int, memory_bytes: int | None) -> None:
    die_with_parent(parent)
    if memory_bytes is not None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


class _Spawner:
    """One daemon thread that forks every child; callers wait for their Popen."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def popen(self, args: list[str], memory_bytes: int | None, kwargs: dict[str, Any]) -> subprocess.Popen:
        with self._lock:
            if self._thread is None:
                sweep_stale()  # the first child of this process: clear what dead processes of ours left
                self._thread = threading.Thread(target=self._serve, name="ptxbench-spawner", daemon=True)
                self._thread.start()
        done: queue.SimpleQueue = queue.SimpleQueue()
        self._requests.put((args, memory_bytes, kwargs, done))
        ok, value = done.get()
        if not ok:
            raise value
        return value

    def _serve(self) -> None:
        while True:
            args, memory_bytes, kwargs, done = self._requests.get()
            env = dict(kwargs.pop("env", None) or os.environ, **{OWNER_ENV: str(os.getpid())})
            setup = functools.partial(_child_setup, os.getpid(), memory_bytes)
            try:
                done.put((True, subprocess.Popen(args, env=env, preexec_fn=setup, **kwargs)))
            except Exception as e:  # OSError (no such binary...): raised in the caller's thread
                done.put((False, e))


_SPAWNER = _Spawner()


def spawn(args: list[str], memory_bytes: int | None = None, **popen_kwargs: Any) -> subprocess.Popen:
    """subprocess.Popen(args, **popen_kwargs), the child bound to die with this process; `memory_bytes`
    caps its address space (RLIMIT_AS)."""
    return _SPAWNER.popen([str(a) for a in args], memory_bytes, popen_kwargs)


def run(
    args: list[str], timeout_s: float, *, input: str | None = None, memory_bytes: int | None = None, **popen_kwargs: Any
) -> subprocess.CompletedProcess:
    """subprocess.run(args, capture_output=True, text=True, timeout=timeout_s) through `spawn`: the child is
    killed on time-out (TimeoutExpired is raised, also at once when no time is left) and when we die."""
    if timeout_s <= 0:
        raise subprocess.TimeoutExpired(args, 0)
    stdin = subprocess.PIPE if input is not None else subprocess.DEVNULL
    proc = spawn(args, memory_bytes, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                 encoding="utf-8", errors="replace", **popen_kwargs)  # fmt: skip
    try:
        out, err = proc.communicate(input, timeout=timeout_s)
    except BaseException:  # a time-out, or an interrupt while waiting: the child must not outlive the call
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


class Budget:
    """A time limit shared by steps that run one after another: each gets what the earlier ones left."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    def left(self) -> float:
        return self._end - time.monotonic()

    def exceeded(self, step: str) -> str:
        """The message for a step the limit cut short (three digits: a budget made from what an outer one left
        holds 1.99999 s of a 2 s limit)."""
        return (
            f"{step} did not finish within the {self.seconds:.3g} s limit of the static stages: make the module "
            "smaller (fewer entries, less unrolling)"
        )


# ------------------------------------------------------------------------------------------ the sweep


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive, and not ours to judge
        return True
    return True


_OWNED = re.compile(rf"^{TEMP_PREFIX}(\d+)-[a-z]+\d*-")  # what temp_prefix makes, and nothing else


def _owner(name: str) -> int | None:
    m = _OWNED.match(name)
    return int(m.group(1)) if m else None


def _orphan_owner(proc: Path) -> int | None:
    """The owner pid a process carries in its environment, if it is a child of ours."""
    with contextlib.suppress(OSError):
        for item in (proc / "environ").read_bytes().split(b"\0"):
            if item.startswith(OWNER_ENV.encode() + b"="):
                value = item.split(b"=", 1)[1]
                return int(value) if value.isdigit() else None
    return None


def sweep_stale(kill: Callable[[int, int], None] = os.kill) -> list[str]:
    """Remove temp files and folders whose owner process is dead, and kill the children it left running.
    Only what carries a dead owner's pid is touched; returns what was removed or killed (for tests)."""
    swept = []
    for path in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*"):
        owner = _owner(path.name)
        if owner is None or owner == os.getpid() or _alive(owner):
            continue
        with contextlib.suppress(OSError):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            swept.append(str(path))
    for proc in Path("/proc").glob("[0-9]*"):
        owner = _orphan_owner(proc)
        if owner is None or owner == os.getpid() or _alive(owner):
            continue
        with contextlib.suppress(OSError):
            kill(int(proc.name), signal.SIGKILL)
            swept.append(f"process {proc.name}")
    return swept
