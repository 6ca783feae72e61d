"""Mining repairs: a teacher repairs another model's failed
attempts through the same repair loop, one seeded run per attempt; how the paper built its fix-it data.

Every failed turn (a status other than passed and unverified: an unverified attempt was never shown to be
wrong) of every run under DIR… gets a run of the teacher that opens with the student's system and task
prompts, the failed attempt and its feedback (agent.solve's `seed` setting), then goes on as any run: the
teacher answers, the harness evaluates, up to max_turns. Runs that were themselves seeded are not
students and are skipped. A teacher run is an ordinary run folder whose config.json names the student's
run, turn, status and model (`seed_attempt`), so `python -m agent.export_sft RUNS_DIR --format fixit`
turns it into pairs whose failed attempt is the student's and whose passing attempt is the teacher's.

Settings are agent.solve's (python -m agent.solve help), given once for every teacher run: llm=… and its
llm.* keys, max_turns, history, target_speedup, budgets, runs_dir, eval.*; task, arch, seed.* and run_id
are set per attempt. Teacher runs are named mined-<student run>-turn<NN>: mining again skips the finished
ones and resumes those cut short, so give another teacher another runs_dir.

Exit status: 0 every teacher run finished (whatever it achieved); 1 some stopped early on an error (run
the same command again to resume them); 2 usage or configuration error; 130 interrupted.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent import cli
from agent.cli import ConfigError
from agent.loop.command_line import solve_settings
from agent.loop.config import RESUMABLE, PolicyConfig, setting_default
from agent.loop.run import Prepared, execute, prepare, resume
from agent.loop.store import RUN_ID, RunFolder, find_runs
from agent.sft.examples import FAILED
from tools.gpu.base import Gpu

PER_ATTEMPT = ("task", "arch", "seed", "run_id", "resume")


@dataclass(frozen=True)
class Attempt:
    """A student's failed turn, and the teacher run that repairs it."""

    folder: RunFolder
    turn: int
    status: str
    task: str
    arch: str
    model: str

    @property
    def run_id(self) -> str:
        run_id = f"mined-{self.folder.run_id}-turn{self.turn:02d}"
        if RUN_ID.match(run_id):
            return run_id
        digest = hashlib.sha256(self.folder.run_id.encode()).hexdigest()[:16]  # a student id near the length limit
        return f"mined-{digest}-turn{self.turn:02d}"


def mine(argv: list[str], gpu: Callable[[], Gpu] | None = None) -> int:
    """Run (or resume) a teacher run per failed attempt, then print what each achieved; `gpu` makes each
    run's GPU (tests feed recorded evaluations)."""
    paths, pairs = cli.split_argv(argv)
    dirs = [Path(p) for p in paths]
    fixed = sorted(k for k in pairs if k.split(".")[0] in PER_ATTEMPT)
    if fixed:
        raise ConfigError(f"{', '.join(fixed)} cannot be given: each teacher run gets its own")
    if not dirs:
        raise ConfigError("name the student runs: python -m agent.mine_repairs DIR… llm=…")
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:
        raise ConfigError(f"no such folder: {', '.join(missing)}")
    attempts, skipped = failed_attempts(find_runs(dirs))
    for s in skipped:
        print(f"warning: skipped {s}", file=sys.stderr)
    if not attempts:
        print(f"no failed attempts to repair under {', '.join(map(str, dirs))}")
        return 0
    runs_dir = Path(pairs.get("runs_dir", setting_default("runs_dir")))
    teacher = solve_settings({**pairs, "task": attempts[0].task, "arch": attempts[0].arch}).llm  # checked up front
    rows, code = [], 0
    for attempt in attempts:
        run = _prepare(attempt, pairs, runs_dir, teacher)
        result = 0
        if run is not None:
            with redirect_stdout(sys.stderr):  # each run's table is progress; stdout keeps the mining table
                result = execute(run, gpu() if gpu else None)
        rows.append(_row(attempt, RunFolder.open(runs_dir, attempt.run_id), fresh=run is not None))
        if result in (2, 130):  # a refused configuration or ^C would end every next run the same way
            code = result
            break
        code = max(code, result)
    print(table(rows))
    print(f"\nfix-it pairs from these runs: python -m agent.export_sft {runs_dir} --format fixit --out FILE.jsonl")
    return code


def failed_attempts(folders: list[RunFolder]) -> tuple[list[Attempt], list[str]]:
    """The failed turns of the student runs among `folders`, with feedback to seed from; and the folders
    that could not be read, each with why."""
    attempts, skipped = [], []
    for folder in folders:
        try:
            recorded = folder.config()
            if recorded.seed:
                continue
            turns = folder.turns()
        except (OSError, ValueError) as e:  # RunFolderError and pydantic's are ValueErrors
            skipped.append(f"{folder.path}: {e}")
            continue
        for turn in turns:
            status = turn.evaluation.status
            if status in FAILED and turn.feedback is not None:
                attempts.append(
                    Attempt(folder, turn.index, status.value, recorded.task, recorded.arch, recorded.llm.model_name)
                )
    return attempts, skipped


def _prepare(attempt: Attempt, pairs: dict[str, str], runs_dir: Path, teacher: PolicyConfig) -> Prepared | None:
    """The teacher run to execute: a new one, the resumption of one cut short, or None when it finished."""
    path = runs_dir / attempt.run_id
    if not path.exists():
        seed = {"seed.run": str(attempt.folder.path.resolve()), "seed.turn": attempt.turn}
        return prepare(solve_settings({**pairs, "task": attempt.task, "arch": attempt.arch, **seed,
                                       "run_id": attempt.run_id}))  # fmt: skip
    folder = RunFolder.open(runs_dir, attempt.run_id)
    recorded = folder.config()
    seeded = recorded.seed_attempt or {}
    if (seeded.get("run_id"), seeded.get("turn")) != (attempt.folder.run_id, attempt.turn):
        raise ConfigError(f"{path} exists but does not repair turn {attempt.turn} of {attempt.folder.run_id}")
    mined_by = _who(recorded.llm.model_dump(mode="json", exclude_unset=True), teacher)
    if mined_by != _who(teacher.model_dump(mode="json"), teacher):
        raise ConfigError(f"{path} was mined by another teacher ({recorded.policy}); give another runs_dir")
    summary = folder.summary()
    if summary is not None and summary.finished:
        return None
    return resume(attempt.run_id, {k: v for k, v in pairs.items() if k in RESUMABLE})


def _who(llm: dict[str, Any], teacher: PolicyConfig) -> dict[str, Any]:
    """What makes a teacher: the policy's settings without how it is reached (what a resumed run may change)."""
    return {k: v for k, v in llm.items() if k not in type(teacher).resumable}


def _row(attempt: Attempt, teacher: RunFolder, *, fresh: bool) -> tuple[str, ...]:
    summary = teacher.summary()
    repaired = summary.first_correct_turn if summary else None
    stop = summary.stop_reason.value if summary and summary.stop_reason else None
    return (
        attempt.folder.run_id,
        str(attempt.turn),
        attempt.status,
        attempt.model,
        teacher.run_id,
        summary.outcome.value if summary else "-",
        f"turn {repaired}" if repaired else "no",
        str(stop) + ("" if fresh else " (earlier)"),
    )


def table(rows: list[tuple[str, ...]]) -> str:
    header = ("student run", "turn", "status", "student", "teacher run", "outcome", "repaired", "stop")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    repaired = sum(r[6] != "no" for r in rows)
    return "\n".join([*lines, "", f"{len(rows)} failed attempts; the teacher repaired {repaired}"])
