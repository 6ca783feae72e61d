"""Running a bench: many repair-loop runs at once, each a normal run folder under one bench folder
(plan.py), then a score table. A bench is continued by resume=BENCH_ID (or the same settings under the same
bench_id): finished runs are skipped, killed ones resumed from their checkpoints.

Runs overlap their model calls (a pool of `concurrency` threads); their GPU stages queue for the GPUs here,
or for those of the Dask pool that eval.pool names, one evaluation per GPU at a time (tools/pool/). `run_bench`'s
exit status: 0 every run finished (whatever the models achieved); 1 some stopped on an error; 130 interrupted.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.bench import score
from agent.bench.plan import (
    DEFAULT_MODES,
    Bench,
    PlannedRun,
    Shared,
    continue_with,
    differences,
    load,
    new_bench_id,
    plan,
    resolve_archs,
    resolve_tasks,
    run_settings,
    run_state,
    shared,
)
from agent.bench.presets import get_preset
from agent.bench.progress import Progress
from agent.bench.tables import markdown_table, percent, times
from agent.cli import ConfigError
from agent.loop.config import ENDPOINT_KEYS, EvalConfig, SolveConfig, setting_default
from agent.loop.journal import Journal
from agent.loop.policies import make_policy
from agent.loop.records import Trajectory
from agent.loop.run import execute, prepare, resume
from agent.loop.store import RunFolder, check_run_id, discard_unstarted, find_runs, read_trajectories
from tasks.catalog import get_task
from tools.pool import open_pool
from tools.pool.base import Interrupted, Pool

DEFAULTS = {"samples": 1, "max_turns": setting_default("max_turns"), "concurrency": 4}


@dataclass(frozen=True)
class RunEnd:
    """How one run of this invocation ended: agent.solve's exit status and the summary's outcome."""

    run_id: str
    code: int
    outcome: str  # solved | correct | unverified | failed, or error
    detail: str | None = None
    tokens: int = 0  # prompt and completion tokens its turns spent


@dataclass(frozen=True)
class Configured:
    """A bench ready to run: its record, its folder, how many runs at once, and its runs' settings (read from the
    command line once, typed from then on)."""

    bench: Bench
    folder: Path
    concurrency: int
    settings: dict[Shared, SolveConfig]

    def settings_of(self, run: PlannedRun) -> SolveConfig:
        """One run's settings: those of its task, arch, mode and variant, with its run id, in the bench folder."""
        return self.settings[shared(run)].model_copy(update={"run_id": run.run_id, "runs_dir": self.folder})

    def labels(self, run: PlannedRun) -> dict[str, str]:
        """What the run's config.json records of the bench beside its settings: the preset and the variant."""
        return {k: v for k, v in (("preset", self.bench.preset), ("variant", run.variant)) if v}


def configure(pairs: dict[str, str]) -> Configured:
    """The bench to run (new, or continued: from resume=ID, or the same settings under the same bench_id),
    its folder, how many runs at once, and its runs' settings. preset=NAME lays its settings under the given ones."""
    pairs = dict(pairs)
    concurrency = _count(pairs, "concurrency")
    runs_dir = Path(pairs.pop("runs_dir", setting_default("runs_dir")))
    endpoint = {k: v for k, v in pairs.items() if k in ENDPOINT_KEYS}
    if "resume" in pairs:
        bench_id = check_run_id(pairs.pop("resume"), "bench id in resume=")
        refused = sorted(k for k in pairs if k not in ENDPOINT_KEYS)
        if refused:
            allowed = ", ".join(["concurrency", "runs_dir", *ENDPOINT_KEYS])
            raise ConfigError(f"a resumed bench cannot change {', '.join(refused)}; it may change only {allowed}")
        return _configured(continue_with(load(runs_dir / bench_id), endpoint), runs_dir / bench_id, concurrency)
    preset = get_preset(pairs.pop("preset")) if "preset" in pairs else None
    from_preset = {k: v for k, v in preset.settings.items() if k not in pairs} if preset else {}
    pairs = {**from_preset, **pairs}
    for key in ("tasks", "archs"):
        if key not in pairs:
            raise ConfigError(f"{key}= required, e.g. tasks=core archs=sm_90a llm=reference")
    wanted = plan(
        bench_id=pairs.pop("bench_id", None) or new_bench_id(),
        tasks=resolve_tasks(pairs.pop("tasks")),
        archs=resolve_archs(pairs.pop("archs")),
        samples=_count(pairs, "samples"),
        max_turns=_count(pairs, "max_turns"),
        modes=[m.strip() for m in pairs.pop("modes", ",".join(DEFAULT_MODES)).split(",") if m.strip()],
        solve=pairs,
        preset=preset,
        preset_settings=from_preset,
    )
    bench_dir = runs_dir / wanted.bench_id
    if not (bench_dir / "bench.json").is_file():
        return _configured(wanted, bench_dir, concurrency)
    saved = load(bench_dir)
    changed = differences(saved, wanted)
    if changed:
        raise ConfigError(
            f"{bench_dir} holds a bench with other settings ({'; '.join(changed)}); "
            f"continue it with resume={saved.bench_id}, or choose another bench_id"
        )
    return _configured(continue_with(saved, endpoint), bench_dir, concurrency)


def _configured(bench: Bench, folder: Path, concurrency: int) -> Configured:
    return Configured(bench, folder, concurrency, run_settings(bench))


def _count(pairs: dict[str, str], key: str) -> int:
    """The whole number ≥ 1 that `key` is given as (taken out of `pairs`), or its default."""
    if key not in pairs:
        return DEFAULTS[key]
    value = pairs.pop(key)
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ConfigError(f"{key} must be a whole number ≥ 1 (got {value!r})")
    return number


def check_runs(ready: Configured) -> dict[Shared, int | None]:
    """Every run's settings and policy, checked before any run starts (a missing reference solution or
    API key fails here, not halfway through); returns how many answers each configuration's policy has (None: no
    end), which bounds its GPU evaluations."""
    answers = {}
    for key, run in {shared(r): r for r in ready.bench.runs}.items():
        settings = ready.settings_of(run)
        policy = make_policy(settings, get_task(run.task), settings.arch, Journal(run.run_id, quiet=True))
        answers[key] = policy.max_answers
        policy.close()
    return answers


def planned_evaluations(ready: Configured, answers: dict[Shared, int | None]) -> str:
    """What the bench will cost in GPU evaluations, in a line: at most one per turn (a tools run: its evaluation
    budget, its submit among them) and, for a policy with a fixed number of answers (llm=reference: one), no more
    than those. Said before anything runs, so a short GPU budget can lower samples= first."""
    bench = ready.bench
    configurations = len({(r.task, r.variant) for r in bench.runs})
    most = sum(_evaluations_at_most(ready.settings_of(r), answers[shared(r)]) for r in bench.runs)
    bounded = [a for a in answers.values() if a is not None]
    why = f" (its policy has {'/'.join(sorted({str(a) for a in bounded}))} answer(s) a run)" if bounded else ""
    return (f"planned: {len(bench.runs)} runs ({configurations} task configurations × {len(bench.archs)} archs × "
            f"{len(bench.modes)} modes × {bench.samples} samples), at most {most:,} GPU evaluations{why}"
            + (f"; preset {bench.preset}" if bench.preset else ""))  # fmt: skip


def _evaluations_at_most(settings: SolveConfig, answers: int | None) -> int:
    limit = settings.max_evaluations if settings.mode == "tools" else settings.max_turns
    return limit if answers is None else min(limit, answers)


def run_bench(ready: Configured) -> int:
    bench, bench_dir, concurrency = ready.bench, ready.folder, ready.concurrency
    states = {r.run_id: run_state(bench_dir, r) for r in bench.runs}
    todo = [r for r in bench.runs if states[r.run_id] != "finished"]
    summaries = [RunFolder(bench_dir / r.run_id).summary() for r in bench.runs if states[r.run_id] == "finished"]
    earlier = Counter(s.outcome.value for s in summaries)
    settings = ready.settings_of(todo[0]).eval if todo else EvalConfig(gpu=False)
    pool = open_pool(settings.pool, settings.gpu)
    try:
        gpus = pool.describe()
    except Interrupted as e:  # the Dask scheduler is out of reach: nothing has started
        raise ConfigError(str(e)) from None
    done = sum(earlier.values())
    print(
        f"bench {bench.bench_id}: {len(bench.runs)} runs, {done} finished earlier"
        + (f"; {concurrency} at a time; {gpus}" if todo else "")
        + f"\n  folder: {bench_dir}",
        file=sys.stderr,
    )
    tokens = sum(s.prompt_tokens + s.completion_tokens for s in summaries)
    progress = Progress(bench.bench_id, len(bench.runs), earlier, pool.load, tokens=tokens)
    try:
        outcomes = run_all(todo, lambda run: run_one(ready, run, pool), concurrency, progress)
    except KeyboardInterrupt:
        progress.close()
        print("interrupted: stopping the GPU workers …", file=sys.stderr)
        pool.interrupt()
        print(f"continue with: python -m agent.bench resume={bench.bench_id} runs_dir={bench_dir.parent}",
              file=sys.stderr)  # fmt: skip
        return 130
    progress.close()
    pool.close()
    planned = {r.run_id for r in bench.runs}
    trajs, skipped = read_trajectories([f for f in find_runs([bench_dir]) if f.run_id in planned])
    for line in skipped:
        print(f"warning: not scored: {line}", file=sys.stderr)
    print(score_table(trajs))
    print(f"\nbench folder: {bench_dir}\nreport: python -m agent.report {bench_dir}")
    errors = [o for o in outcomes if o.code != 0]
    for o in errors:
        print(f"  {o.run_id} stopped: {o.detail}", file=sys.stderr)
    if errors:
        print(f"continue with: python -m agent.bench resume={bench.bench_id} runs_dir={bench_dir.parent}",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def run_all(
    todo: list[PlannedRun], work: Callable[[PlannedRun], RunEnd], concurrency: int, progress: Progress
) -> list[RunEnd]:
    """`work` on every run, `concurrency` at a time, in daemon threads: an interrupted bench exits without
    waiting for model calls in flight (their runs resume from their checkpoints)."""
    pending: queue.SimpleQueue[PlannedRun] = queue.SimpleQueue()
    for run in todo:
        pending.put(run)
    events: queue.SimpleQueue[RunEnd | None] = queue.SimpleQueue()  # None: a run started
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            try:
                run = pending.get_nowait()
            except queue.Empty:
                return
            events.put(None)
            try:
                events.put(work(run))
            except Exception as e:  # a bug around the run, not in it (agent.solve catches those)
                events.put(RunEnd(run.run_id, 1, "error", f"{type(e).__name__}: {e}"))

    for _ in range(min(concurrency, len(todo))):
        threading.Thread(target=worker, daemon=True).start()
    outcomes: list[RunEnd] = []
    try:
        while len(outcomes) < len(todo):
            try:
                event = events.get(timeout=1.0)
            except queue.Empty:
                progress.draw()
                continue
            if event is None:
                progress.start()
            else:
                outcomes.append(event)
                progress.finish(event.outcome, event.tokens)
    except KeyboardInterrupt:
        stop.set()
        raise
    return outcomes


def run_one(ready: Configured, run: PlannedRun, pool: Pool) -> RunEnd:
    """One run through agent.solve: started, or resumed from its checkpoint, sharing the pool's GPUs."""
    path, settings = ready.folder / run.run_id, ready.settings_of(run)
    try:
        if run_state(ready.folder, run) == "resume":
            changes = _endpoint_changes(ready.bench, settings, path)
            prepared = resume(run.run_id, {"runs_dir": ready.folder, **changes}, quiet=True)
        else:
            discard_unstarted(path)
            prepared = prepare(settings, quiet=True, labels=ready.labels(run))
    except ConfigError as e:  # RunFolderError is one
        return RunEnd(run.run_id, 2, "error", str(e))
    code = execute(prepared, gpu=pool)
    summary = prepared.folder.summary()
    outcome = summary.outcome.value if code == 0 and summary else "error"
    if summary is None:
        return RunEnd(run.run_id, code, outcome)
    return RunEnd(run.run_id, code, outcome, summary.stop_detail, summary.prompt_tokens + summary.completion_tokens)


def _endpoint_changes(bench: Bench, settings: SolveConfig, path: Path) -> dict[str, Any]:
    """The endpoint and pool settings the bench gives where the run's settings differ from what it recorded."""
    recorded = RunFolder(path).config()
    before = {"llm": recorded.llm.model_dump(mode="json"), "eval": recorded.eval}
    now = settings.model_dump(mode="json")
    changes = {}
    for key in bench.solve:
        group, _, name = key.partition(".")
        if key in ENDPOINT_KEYS and now[group].get(name) != before[group].get(name):
            changes[key] = now[group][name]
    return changes


def score_table(trajs: list[Trajectory]) -> str:
    """Per arch and mode, over all tasks: correct, unverified, correct with targets, fast_1, geomean speedup by
    turn limit; a note says what unverified means where some are."""
    rows, unverified = [], False
    for s in score.suite_scores(trajs):
        g = s.group
        if not score.pooled(g.task) or score.pooled(g.arch):
            continue
        unverified |= s.unverified > 0
        rows.append((g.model, g.arch, g.mode, s.turn_limit, s.trajectories, percent(s.correct),
                     percent(s.unverified), percent(s.correct_targets), percent(s.fast_traj[score.FAST_P.index(1.0)]),
                     times(s.geomean_speedup), s.unfinished))  # fmt: skip
    headers = ("model", "arch", "mode", "turns ≤", "runs", "correct", "unverified", "+targets", "fast_1", "geomean",
               "unfinished")  # fmt: skip
    if not rows:
        return "(no runs to score)"
    return markdown_table(headers, rows) + (f"\n\n{UNVERIFIED_NOTE}" if unverified else "")


UNVERIFIED_NOTE = (
    "unverified: compiled and checked statically, GPU stages skipped (no GPU of the arch here); not counted as "
    "correct. Run on a GPU host (or eval.pool=dask://HOST:PORT) for a verdict."
)
