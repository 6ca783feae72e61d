"""Every file the agent writes into a run, bench or output folder goes through here, so nothing we write can
leave that folder: a symbolic link planted there (attempts/turn_02.response.md → ~/.bashrc, events.log →
another file, site/index.html → …) is refused, not followed, and so is a hard link to a file elsewhere.

`root` is the folder a write must stay in (by default the file's own folder); the file is opened without
following links (O_NOFOLLOW), its folder must resolve inside `root`, and what is opened must be a regular file
of one link, checked before anything in it is truncated.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, Any

from agent.cli import ConfigError

_FLAGS = {"w": os.O_WRONLY | os.O_CREAT, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "r+": os.O_RDWR}


class UnsafePath(ConfigError):
    """A place to write that leads outside the folder it must stay in; nothing was written (exit 2)."""


def open_inside(path: Path, mode: str = "w", root: Path | None = None, **text: Any) -> IO[Any]:
    """`open(path, mode)` for writing ("w", "a", "r+", each with "b"), refusing links; `text`: open's
    encoding/newline arguments."""
    path = Path(path)
    _check_folder(path, Path(root) if root is not None else path.parent)
    flags = _FLAGS[mode.replace("b", "")] | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:
        if path.is_symlink():
            raise UnsafePath(f"{path} is a symbolic link: refusing to write through it") from None
        if path.exists() and not path.is_file() and not path.is_dir():  # a FIFO without a reader, a socket
            raise UnsafePath(f"{path} is not a regular file: refusing to write to it") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafePath(f"{path} is not a regular file: refusing to write to it")
        if info.st_nlink > 1:
            raise UnsafePath(f"{path} is a hard link ({info.st_nlink} names): refusing to write through it")
        os.set_blocking(fd, True)
        if mode.startswith("w"):
            os.ftruncate(fd, 0)
        return os.fdopen(fd, mode, **text)
    except BaseException:
        os.close(fd)
        raise


def write_inside(path: Path, data: str | bytes, root: Path | None = None, atomic: bool = False) -> None:
    """The whole file; `atomic`: through a temporary file renamed over it (a reader never sees half of it;
    a rename replaces a link itself, never its target)."""
    path = Path(path)
    target = path.with_name(path.name + ".tmp") if atomic else path
    with open_inside(target, "wb" if isinstance(data, bytes) else "w", root,
                     **({} if isinstance(data, bytes) else {"encoding": "utf-8"})) as f:  # fmt: skip
        f.write(data)
    if atomic:
        os.replace(target, path)


def folder_inside(path: Path, root: Path) -> Path:
    """`path` made (with its parents) as a folder inside `root`, or UnsafePath if it leads outside."""
    path = Path(path)
    _check_folder(path / "-", root)  # before making anything: resolving follows the links that exist
    path.mkdir(parents=True, exist_ok=True)
    return path


def _check_folder(path: Path, root: Path) -> None:
    folder, inside = path.parent.resolve(), root.resolve()
    if folder != inside and not folder.is_relative_to(inside):
        raise UnsafePath(f"{path.parent} leads outside {root} (a symbolic link): refusing to write {path.name} there")
