"""Reference solutions: one Markdown answer per task × arch, at tasks/solutions/<arch>/<task>.md.

They are the `llm=reference` policy's answers, the harness's end-to-end check on real kernels, and
teacher data. How each was made is recorded in its file and in tasks/solutions/README.md.
"""

from __future__ import annotations

from pathlib import Path

from tasks.schema import Arch

ROOT = Path(__file__).parent


def answer_path(task: str, arch: Arch | str) -> Path:
    return ROOT / str(Arch.resolve(arch)) / f"{task}.md"


def reference_answer(task: str, arch: Arch | str) -> str | None:
    """The reference answer's Markdown, or None when this task × arch has none yet."""
    path = answer_path(task, arch)
    return path.read_text() if path.is_file() else None


def available() -> list[tuple[str, str]]:
    """(task, arch) pairs that have a reference answer."""
    return sorted((p.stem, p.parent.name) for p in ROOT.glob("sm_*/*.md"))
