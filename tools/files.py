"""Files named on a command line, read as what they are: a folder, a device (/dev/zero, which never ends) or
a FIFO is said to be one, not "no such file"; a file is read up to a cap, not trusted for its size (a file in
/proc says 0 bytes and holds more)."""

from __future__ import annotations

import stat
from pathlib import Path

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))  # fmt: skip


def not_a_file(path: Path) -> str | None:
    """Why `path` cannot be read as a regular file, in a few words ("no such file", "is a folder, not a
    file"), or None when it is one."""
    try:
        mode = Path(path).stat().st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    kind = next((name for test, name in _KINDS if test(mode)), None if stat.S_ISREG(mode) else "not a regular file")
    return f"is {kind}, not a file" if kind else None


def read_capped(path: Path, cap: int) -> bytes:
    """At most `cap` + 1 bytes of `path` (one more than the cap, so that a caller can tell it was exceeded)."""
    with open(path, "rb") as f:
        return f.read(cap + 1)
