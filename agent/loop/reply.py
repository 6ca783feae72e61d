"""What the loop keeps of a model's reply, so that no reply can break or swamp a run:

- Lone surrogates (U+D800–U+DFFF without their pair, which a server can send as JSON escapes and no UTF-8
  file can hold) become U+FFFD; the Turn records each one's index and code point (`lone_surrogates`), so
  `restore` gives back the exact text. The escape is reversible; the replacement character is standard.
- A field longer than RECORD_BYTES is kept whole once, gzipped, in the run folder's attempts/ (up to
  ARCHIVE_BYTES); the trajectory, the checkpoints and the next prompt hold its first HEAD_CHARS characters
  and a marker with its size and sha256 (`Turn.cuts`). The extract stage reads the whole answer back.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import re
from pathlib import Path
from typing import Any

from agent.loop.policies.base import Reply
from agent.loop.records import ReplyCut
from agent.loop.writes import write_inside

RECORD_BYTES = 1 << 20
HEAD_CHARS = 64 << 10
ARCHIVE_BYTES = 64 << 20  # over the extract stage's answer cap (tools/answer.py), so it can refuse by size
_SURROGATE = re.compile("[\ud800-\udfff]")
FIELDS = {"response": "text", "reasoning": "reasoning"}  # Turn field → Reply attribute


def _exact_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def escape(text: str) -> tuple[str, list[tuple[int, int]]]:
    """`text` with each lone surrogate replaced by U+FFFD, and the (index, code point) of each."""
    found = [(m.start(), ord(m.group())) for m in _SURROGATE.finditer(text)]
    return (_SURROGATE.sub("\ufffd", text) if found else text), found


def restore(text: str, surrogates: list[tuple[int, int]]) -> str:
    """The text `escape` was given."""
    chars = list(text)
    for index, code in surrogates:
        chars[index] = chr(code)
    return "".join(chars)


def keep(reply: Reply, attempts: Path, turn: int) -> dict[str, Any]:
    """The reply as the loop's state holds it: valid text, cut where oversized (the whole written beside the
    run first), with the cuts and the escaped surrogates recorded."""
    kept: dict[str, Any] = {"cuts": [], "lone_surrogates": {}}
    for field, attribute in FIELDS.items():
        text = getattr(reply, attribute)
        if text is not None and len(text) > RECORD_BYTES // 4 and len(raw := _exact_bytes(text)) > RECORD_BYTES:
            cut = _archive(field, raw, attempts, turn)
            kept["cuts"].append(cut.model_dump())
            text = text[:HEAD_CHARS] + marker(cut)
        if text is not None:
            text, surrogates = escape(text)
            if surrogates:
                kept["lone_surrogates"][field] = surrogates
        kept[attribute] = text
    return kept


def marker(cut: ReplyCut) -> str:
    return (
        f"\n\n[… cut by PTXBench: this {cut.field} was {cut.bytes:,} bytes (sha256 {cut.sha256}); only its first "
        f"{HEAD_CHARS:,} characters are kept here, the whole is in {cut.archive} …]"
    )


def _archive(field: str, raw: bytes, attempts: Path, turn: int) -> ReplyCut:
    path = attempts / f"turn_{turn:02d}.{field}.full.gz"
    stored = raw[:ARCHIVE_BYTES]
    write_inside(path, gzip.compress(stored, compresslevel=6), attempts.parent)
    return ReplyCut(field=field, bytes=len(raw), sha256=hashlib.sha256(raw).hexdigest(),
                    archive=f"{attempts.name}/{path.name}", archived_bytes=len(stored))  # fmt: skip


def whole_answer(kept: dict[str, Any], folder: Path) -> str:
    """The answer the extract stage reads: the kept text, or for a cut one the whole text from its side
    file (surrogates escaped as everywhere else, so the solution it yields is valid text)."""
    cut = next((c for c in kept.get("cuts", []) if c["field"] == "response"), None)
    if cut is None:
        return kept["text"]
    raw = gzip.decompress((folder / cut["archive"]).read_bytes())
    # A side file at its cap may end inside a character: the decoder leaves that partial character out.
    text = codecs.getincrementaldecoder("utf-8")("surrogatepass").decode(raw, final=False)
    return escape(text)[0]
