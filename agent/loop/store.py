"""The run folder: a contract, the only thing scoring, replay, reports and SFT export read.

runs/<run_id>/
  config.json        the run's settings (never secrets: redact.py masks credentials in them) and format version
  trajectory.jsonl   one Turn per line, appended and flushed as each turn ends; a tools-mode run's lines are its
                     steps (a ReplyStep per model reply, a ToolStep per tool call) and at the end one Turn
  summary.json       outcome, best attempt, metrics; rewritten after each turn
  events.log         structured log (JSON lines)
  checkpoints.sqlite the repair loop's LangGraph checkpoints (thread id = run id), for resume=RUN_ID
  attempts/          turn_NN.response.md (the answer) and turn_NN.feedback.md (what the loop told the model
                     about it); turn_NN.ptx or .cu and turn_NN.launch.json when a solution was extracted;
                     turn_NN.response.full.gz (and .reasoning.full.gz): an oversized reply, whole (reply.py);
                     turn_NN.module.json: the compiled module (cubin, PTX, plan) the GPU step runs, written by
                     the compile step, its sha256 kept in the checkpoint and checked when read
  trajectory.torn    torn last lines cut from trajectory.jsonl on resume (a run killed mid-write), kept

A file that does not parse is a RunFolderError naming the file (and line); a process that runs or resumes a
run holds an exclusive lock on its folder, so two cannot drive one run at once. Every file is written through
agent/loop/writes.py, so no write follows a link out of the folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from agent.cli import ConfigError
from agent.loop.records import TRAJECTORY_FORMAT, ReplyStep, RunConfig, RunSummary, Step, ToolStep, Trajectory, Turn
from agent.loop.redact import redact
from agent.loop.writes import open_inside, write_inside
from tools.answer import format_validation_error
from tools.gpu.base import CompiledModule

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class RunFolderError(ConfigError):
    """A run id or folder we refuse or cannot read; the message says why (a usage error: exit 2)."""


def check_run_id(run_id: str, what: str = "run id") -> str:
    """A run id (or `what` else names a folder under runs_dir: a bench_id) is one path component of letters,
    digits, '.', '_' and '-' (so it stays under runs_dir)."""
    if not RUN_ID.match(run_id) or run_id in (".", ".."):
        kind = " is a path, not a folder name:" if "/" in run_id or run_id in (".", "..") else ":"
        raise RunFolderError(f"invalid {what} {run_id!r}{kind} use letters, digits, '.', '_' and '-' (at most 128)")
    return run_id


def new_run_id(task: str, arch: str) -> str:
    return check_run_id(f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{task}-{arch}-{secrets.token_hex(3)}")


def error_line(error: Exception) -> str:
    """A reading error on one line: pydantic's as `field: message` pairs, any other as its text."""
    if isinstance(error, ValidationError):
        return "; ".join(line.removeprefix("- ") for line in format_validation_error(error, limit=3).splitlines())
    return " ".join(str(error).split())


class RunFolder:
    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(
        cls, runs_dir: Path, run_id: str, config: dict[str, Any], hold: contextlib.ExitStack | None = None
    ) -> RunFolder:
        """A new run folder; with `hold`, locked there from the moment it exists (before config.json is written),
        so another process never finds it unlocked and without turns, which it would take for a dead start."""
        path = Path(runs_dir) / check_run_id(run_id)
        if path.exists():
            raise RunFolderError(f"run folder {path} already exists (use resume={run_id} to continue it)")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunFolderError(f"runs_dir: cannot create {path}: {e.strerror}") from None
        try:
            path.mkdir()
        except FileExistsError:
            raise RunFolderError(f"run folder {path} already exists (use resume={run_id} to continue it)") from None
        except OSError as e:
            raise RunFolderError(f"runs_dir: cannot create {path}: {e.strerror}") from None
        if hold is not None:
            hold.enter_context(_locked(path))
        (path / "attempts").mkdir()
        folder = cls(path)
        folder.write_config(config)
        write_inside(path / "trajectory.jsonl", "")
        return folder

    @classmethod
    def open(cls, runs_dir: Path | None, run_id_or_path: str | Path) -> RunFolder:
        """An existing run, by id under `runs_dir`, or by its folder's path."""
        given = Path(run_id_or_path)
        if runs_dir is not None and given.name == str(run_id_or_path):
            path = Path(runs_dir) / check_run_id(str(run_id_or_path))
        else:
            path = given
        if not (path / "config.json").is_file():
            raise RunFolderError(f"{path} is not a run folder (no config.json)")
        return cls(path)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def events_path(self) -> Path:
        return self.path / "events.log"

    @property
    def checkpoints_path(self) -> Path:
        return self.path / "checkpoints.sqlite"

    def config(self) -> RunConfig:
        return _read(self.path / "config.json", RunConfig)

    def write_config(self, config: dict[str, Any]) -> None:
        """Replace the settings (a resumed run that changed its limits records the new ones)."""
        text = json.dumps({"format_version": TRAJECTORY_FORMAT, **redact(config)}, indent=2)
        write_inside(self.path / "config.json", text, self.path, atomic=True)

    def summary(self) -> RunSummary | None:
        p = self.path / "summary.json"
        return _read(p, RunSummary) if p.is_file() else None

    def write_summary(self, summary: RunSummary) -> None:
        text = json.dumps(redact(summary.model_dump(mode="json")), indent=2)
        write_inside(self.path / "summary.json", text, self.path, atomic=True)

    def keep_module(self, turn: int, module: CompiledModule) -> dict[str, str]:
        """Write a turn's compiled module; returns where it is and its sha256, for the loop's state to hold."""
        relative = f"attempts/turn_{turn:02d}.module.json"
        data = module.model_dump_json().encode()
        write_inside(self.path / relative, data, self.path, atomic=True)
        return {"path": relative, "sha256": hashlib.sha256(data).hexdigest()}

    def module(self, kept: dict[str, str]) -> CompiledModule:
        """A module keep_module wrote, refused (naming the file) if it is missing or changed since."""
        path = self.path / kept["path"]
        try:
            data = path.read_bytes()
        except OSError as e:
            raise RunFolderError(f"{path}: cannot read the compiled module ({e.strerror})") from None
        if hashlib.sha256(data).hexdigest() != kept["sha256"]:
            raise RunFolderError(f"{path} changed since the compile step wrote it (its sha256 differs): compile the "
                                 "attempt again by starting a new run")  # fmt: skip
        return CompiledModule.model_validate_json(data)

    def append_turn(self, turn: Turn) -> None:
        """Write the turn's attempt files, then its line; the line is flushed to disk before returning."""
        stem = self.path / "attempts" / f"turn_{turn.index:02d}"
        write_inside(stem.with_suffix(".response.md"), turn.response, self.path)
        if turn.feedback is not None:
            write_inside(stem.with_suffix(".feedback.md"), turn.feedback, self.path)
        if turn.solution is not None:
            suffix = ".ptx" if turn.solution.language == "ptx" else ".cu"
            write_inside(stem.with_suffix(suffix), turn.solution.source, self.path)
            write_inside(stem.with_suffix(".launch.json"), turn.solution.launch.model_dump_json(indent=2), self.path)
        self._append_line(turn.model_dump_json())

    def append_step(self, step: Step) -> None:
        """A tools-mode step's line, flushed to disk before returning."""
        self._append_line(step.model_dump_json())

    def _append_line(self, line: str) -> None:
        with open_inside(self.path / "trajectory.jsonl", "a", self.path, encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def turns(self, problems: list[str] | None = None) -> list[Turn]:
        """Every finished turn; a torn last line (a run killed mid-write) is ignored. Any other line that is
        not a turn raises RunFolderError, or, when `problems` is given, is skipped and said there (so that a
        reader such as the inspector shows the rest). A tools-mode step's line is not a turn: steps() reads it."""
        return [r for r in self._records(problems) if isinstance(r, Turn)]

    def steps(self, problems: list[str] | None = None) -> list[Step]:
        """A tools-mode run's replies and tool calls, in order (none for a turns-mode run)."""
        return [r for r in self._records(problems) if not isinstance(r, Turn)]

    def _records(self, problems: list[str] | None) -> list[Turn | Step]:
        p = self.path / "trajectory.jsonl"
        if not p.is_file():
            return []
        lines = _text(p).splitlines()
        records: list[Turn | Step] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            model = _model_of(line)
            try:
                records.append(model.model_validate_json(line))
            except ValidationError as e:
                if number == len(lines):
                    break
                what = "a turn" if model is Turn else f"a {model.__name__}"
                if problems is None:
                    raise RunFolderError(f"{p}, line {number}: not {what} ({error_line(e)})") from None
                problems.append(f"{p}, line {number}: not {what} ({error_line(e)})")
        return records

    def cut_torn_tail(self) -> int:
        """Cut a torn last line (no newline at its end: a run killed mid-write) from trajectory.jsonl, so the
        next turn starts on a line of its own; the piece is kept in trajectory.torn. Returns its length."""
        p = self.path / "trajectory.jsonl"
        data = p.read_bytes() if p.is_file() else b""
        if not data or data.endswith(b"\n"):
            return 0
        start = data.rfind(b"\n") + 1
        with open_inside(self.path / "trajectory.torn", "ab", self.path) as torn:
            torn.write(data[start:] + b"\n")
        with open_inside(p, "r+b", self.path) as f:
            f.truncate(start)
            os.fsync(f.fileno())
        return len(data) - start

    def lock(self) -> contextlib.AbstractContextManager[None]:
        """Hold this run for this process (released when the process ends, however it ends)."""
        return _locked(self.path)

    def refuse_links(self) -> None:
        """A symbolic link inside the folder (planted: turn_02.response.md → a file elsewhere) would lead what a
        resumed run writes out of it: refuse the folder, naming the link."""
        for folder, dirs, files in os.walk(self.path):
            for link in (Path(folder) / name for name in dirs + files):
                if link.is_symlink():
                    raise RunFolderError(f"{link} is a symbolic link: a run folder holds none (a write through it "
                                         "would leave the folder); remove it to resume")  # fmt: skip

    def trajectory(self) -> Trajectory:
        return Trajectory(run_id=self.run_id, config=self.config(), turns=self.turns(), summary=self.summary(),
                          steps=self.steps())  # fmt: skip


# A step's line starts with its kind (the models' first field), which is how a line is told from a turn's.
_KIND = '{"kind":"'
_STEP_KINDS: dict[str, type[ReplyStep | ToolStep]] = {"reply": ReplyStep, "tool": ToolStep}


def _model_of(line: str) -> type[Turn | ReplyStep | ToolStep]:
    if not line.startswith(_KIND):
        return Turn
    return _STEP_KINDS.get(line[len(_KIND) :].split('"', 1)[0], Turn)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise RunFolderError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise RunFolderError(f"{path}: cannot read it ({e.strerror})") from None


def _read(path: Path, model: type[BaseModel]) -> Any:
    try:
        return model.model_validate_json(_text(path))
    except ValidationError as e:
        raise RunFolderError(f"{path} does not hold a {model.__name__} ({error_line(e)})") from None


@contextlib.contextmanager
def _locked(path: Path):
    fd = os.open(path, os.O_RDONLY)  # a lock on the folder itself: nothing is written to take it
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderError(f"{path} is in use: another process is running or resuming this run") from None
        yield
    finally:
        os.close(fd)


def discard_unstarted(path: Path) -> None:
    """Remove a run folder killed before its first checkpoint (it holds no turn), so the run can start over;
    a folder another process holds is in use, never removed."""
    if not path.exists():
        return
    with _locked(path):
        if (path / "config.json").is_file() and RunFolder(path).turns():
            raise RunFolderError(f"{path} holds turns but no checkpoint to resume from; move it away to rerun it")
        shutil.rmtree(path)


def read_trajectories(folders: list[RunFolder]) -> tuple[list[Trajectory], list[str]]:
    """The trajectories that can be read, and a line per folder that cannot (its file and why)."""
    trajectories, skipped = [], []
    for folder in folders:
        try:
            trajectories.append(folder.trajectory())
        except RunFolderError as e:
            skipped.append(str(e))
    return trajectories, skipped


def find_runs(paths: list[Path]) -> list[RunFolder]:
    """Run folders at or below each path (a run folder, a bench folder, a runs dir), sorted by path."""
    found = set()
    for root in paths:
        root = Path(root)
        if (root / "config.json").is_file() and (root / "trajectory.jsonl").exists():
            found.add(root)
        else:
            found |= {p.parent for p in root.rglob("trajectory.jsonl") if (p.parent / "config.json").is_file()}
    return [RunFolder(p) for p in sorted(found)]
