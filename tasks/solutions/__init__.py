"""Reference solutions: one Markdown answer per definition × arch, at tasks/solutions/<arch>/<key>.md, serving every
workload of its definition (the kernels take the variable dim, M or S, at run time; the launch spec's expressions
fill the shape in). The bf16 GEMM kernel takes N and K at run time too, so the core GEMM's answer serves every
bf16 GEMM definition.

They are the `llm=reference` policy's answers, the harness's end-to-end check on real kernels, and teacher data.
How each was made is recorded in its file and in tasks/solutions/README.md.
"""

from __future__ import annotations

from pathlib import Path

from tasks.catalog import TASKS, get_task
from tasks.schema import Arch, Task

ROOT = Path(__file__).parent
SHARED = {"gemm": "gemm_n7168_k5120"}  # family → the answer every definition of it uses


def answer_key(task: Task) -> str:
    """The file stem of the answer that serves `task`: its definition's, or its family's shared one where the task's
    tensors are that answer's (names, dtypes, shapes over the same dims: a FlashInfer-Bench GEMM over A[M,K], B[N,K],
    C[M,N] in bf16 is served by our GEMM's answer; one in fp16 is not)."""
    shared = SHARED.get(task.family)
    if shared is None or (task.source is not None and _tensors(task) != _tensors(TASKS[shared])):
        return task.definition
    return shared


def _tensors(task: Task) -> list[tuple[str, str, tuple[str, ...], str]]:
    return [(t.name, t.dtype, tuple(t.shape), t.role) for t in task.tensors]


def answer_path(task: str, arch: Arch | str) -> Path:
    return ROOT / str(Arch.resolve(arch)) / f"{answer_key(get_task(task))}.md"


def reference_answer(task: str, arch: Arch | str) -> str | None:
    """The reference answer's Markdown for the task (any of its names), or None when it has none yet on `arch`."""
    path = answer_path(task, arch)
    return path.read_text() if path.is_file() else None


def available() -> list[tuple[str, str]]:
    """(task, arch) pairs that have a reference answer, every workload of every definition that has one."""
    files = {(p.stem, p.parent.name) for p in ROOT.glob("sm_*/*.md")}
    return [(name, str(arch)) for name, task in TASKS.items() for arch in Arch if (answer_key(task), arch) in files]


def answered_by(key: str) -> list[str]:
    """The tasks one answer file serves, in catalog order."""
    return [name for name, task in TASKS.items() if answer_key(task) == key]
