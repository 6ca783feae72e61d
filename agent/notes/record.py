"""A repair note (one failed attempt, and the later attempt of the same run that fixed it or ran faster) as a
typed record, its signature text (what retrieval matches), and the notes file: JSONL, one note a line, each
with its format version."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.cli import ConfigError
from tools.evaluation import Evaluation, Stage, StageState

NOTES_FORMAT = 1
KEY_LINES = 4  # lines a signature keeps: two of the failing stage's message, two of the sanitizer's
DIAGNOSES = (Stage.MEMCHECK, Stage.RACECHECK)  # they locate a failure; the failing stage is the one before
LINE_CHARS = 200
# Lines that say what went wrong (ptxas's errors, the check's region, a fault's kind and line), preferred over
# the message's other lines.
TELLING = re.compile(r"error|fault|illegal|invalid|out of bounds|mismatch|region|line \d+|causal|nan|timed? ?out",
                     re.IGNORECASE)  # fmt: skip


class Provenance(BaseModel):
    """Where a note was mined: the run, its failed turn and the turn that repaired it."""

    run_id: str
    task: str
    failed_turn: int
    fixed_turn: int


class Signature(BaseModel):
    """What the failure looked like to the loop."""

    status: str = Field(description="The failed attempt's status (compile_error, mismatch, …; passed: too slow).")
    stage: str | None = Field(None, description="The stage that failed (None: it passed, but slowly).")
    key_lines: list[str] = Field(default_factory=list, description="The message's telling lines, cut.")
    limiter: str | None = Field(None, description="The perf pass's likely limiter, when it ran.")

    def text(self) -> str:
        return " ".join([self.status, self.stage or "", *self.key_lines, self.limiter or ""]).strip()


class Change(BaseModel):
    """What the repairing attempt changed."""

    lines_added: int = 0
    lines_removed: int = 0
    instructions: dict[str, tuple[int, int]] = Field(
        default_factory=dict, description="Mnemonic → (count before, count after), for those whose count changed."
    )
    launch: list[str] = Field(default_factory=list, description="Launch-spec fields that changed, as 'field: a → b'.")
    summary: str = Field(description="All of the above in one line.")


class RepairNote(BaseModel):
    """One repair, as a note the loop can show a model that meets the same failure."""

    model_config = ConfigDict(extra="forbid")
    format_version: int = NOTES_FORMAT
    id: str = Field(description="sha256 of family, arch, signature and change, 12 hex digits: equal notes share it.")
    family: str = Field(description="The task's family (gemm, attention_fwd, attention_bwd).")
    arch: str
    signature: Signature
    change: Change
    outcome: str = Field(description="fixed (from → to) or faster (by how much).")
    provenance: list[Provenance] = Field(description="Every repair this note stands for.")

    @staticmethod
    def make_id(family: str, arch: str, signature: Signature, change: Change) -> str:
        key = json.dumps([family, arch, signature.model_dump(mode="json"), change.summary], sort_keys=True)
        return hashlib.sha256(key.encode()).hexdigest()[:12]

    def tasks(self) -> set[str]:
        return {p.task for p in self.provenance}

    def render(self) -> str:
        """The note as the feedback shows it."""
        where = f" at {self.signature.stage}" if self.signature.stage else ""
        said = "; ".join(self.signature.key_lines)
        return (f"- [{self.id}] {self.signature.status}{where}" + (f": {said}" if said else "") +
                f"\n  changed: {self.change.summary}\n  outcome: {self.outcome}")  # fmt: skip


def signature(evaluation: Evaluation) -> Signature:
    """The failure's signature: status, failing stage, the telling lines (else the first) of its message and of
    compute-sanitizer's (a fault's kind and line), the perf limiter."""
    failed = [s for s in evaluation.stages if s.state is StageState.FAILED]
    gate = next((s for s in failed if s.name not in DIAGNOSES), None)
    said = [gate.message if gate and gate.message else evaluation.message] if failed else []
    said += [s.message for s in failed if s.name in DIAGNOSES]
    lines = [line for text in said for line in _telling(text)]
    limiter = evaluation.perf.limiter if evaluation.perf is not None else None
    return Signature(status=evaluation.status.value, stage=gate.name.value if gate else None,
                     key_lines=lines[:KEY_LINES], limiter=limiter)  # fmt: skip


def _telling(text: str) -> list[str]:
    lines = [" ".join(line.split())[:LINE_CHARS] for line in (text or "").splitlines() if line.strip()]
    return [line for line in lines if TELLING.search(line)][:2] or lines[:1]


def read_notes(path: Path) -> list[RepairNote]:
    """The notes in `path`; a file that cannot be read, a line that is not a note, or a note of a newer format
    than this code reads is a ConfigError on one line naming the file and the line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    notes = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"{where}: not JSON ({e.msg}); a notes file is JSONL from python -m agent.mine_notes"
            ) from None
        version = data.get("format_version") if isinstance(data, dict) else None
        if isinstance(version, int) and version > NOTES_FORMAT:
            raise ConfigError(f"{where}: a note of format {version}, newer than this code reads "
                              f"({NOTES_FORMAT}); mine the notes again or update")  # fmt: skip
        try:
            notes.append(RepairNote.model_validate(data))
        except ValidationError as e:
            first = e.errors()[0]
            field = ".".join(map(str, first["loc"])) or "the line"
            raise ConfigError(f"{where}: not a repair note ({field}: {first['msg']})") from None
    return notes


def notes_sha256(path: Path) -> str:
    """Of the notes file's bytes, for the run's config: which notes a run could have been shown."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_notes(path: Path, notes: list[RepairNote]) -> None:
    Path(path).write_text("".join(n.model_dump_json() + "\n" for n in notes), encoding="utf-8")
