"""One repair-loop run from its settings to its end: `prepare` (a new run's policy and run folder, from its
SolveConfig) or `resume` (a recorded run, from its checkpoint), then `execute` (the graph, to a stopping rule or
an error that leaves the run resumable). `python -m agent.solve` is the command around them
(agent/loop/command_line.py reads its words); agent.bench and agent.mine_repairs call them too.

execute's exit status: 0 the run finished, whatever the model achieved; 1 it stopped early on an error
(the endpoint failed after its retries, or the harness crashed) and can be resumed; 2 configuration
error; 130 interrupted.
"""

from __future__ import annotations

import contextlib
import sqlite3
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from agent import cli
from agent.cli import ConfigError
from agent.loop.checkpoints import LoopSerializer, check_database
from agent.loop.config import RESUMABLE, SeedConfig, SolveConfig, setting_default
from agent.loop.conversation import Exchange
from agent.loop.graph import build_graph
from agent.loop.journal import Journal
from agent.loop.nodes import write_summary
from agent.loop.policies import ModelError, Policy, make_policy
from agent.loop.prompts import parse_prompt, system_prompt, task_prompt, toolchain
from agent.loop.records import RunSummary, ToolsOutcome
from agent.loop.redact import URL_MASK, redact
from agent.loop.routing import stop_reason
from agent.loop.seed import Seed, load_seed
from agent.loop.state import RunContext
from agent.loop.store import RunFolder, RunFolderError, check_run_id, new_run_id
from agent.loop.summary import summarize
from agent.notes.record import notes_sha256
from agent.notes.retrieve import NoteIndex
from tasks.catalog import CATALOG_VERSION, get_task, renamed
from tasks.schema import Task, UnknownName
from tools.gpu.base import Gpu
from tools.pool import open_gpu
from tools.pool.base import Interrupted

STEPS_PER_TURN = 5


@dataclass
class Prepared:
    settings: SolveConfig
    task: Task
    folder: RunFolder
    policy: Policy
    journal: Journal
    resumed: bool
    seed: Seed | None = None
    hold: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # the run folder's lock


def prepare(settings: SolveConfig, quiet: bool = False, labels: Mapping[str, str] | None = None) -> Prepared:
    """A new run: policy and run folder; every configuration problem surfaces here, before the run folder is
    created. A `quiet` run prints nothing (agent.bench runs many at once). `labels`: what config.json records
    beside the settings of the bench the run is one trajectory of (RunConfig's preset and variant)."""
    task = _task(settings.task)
    note = renamed(settings.task)
    settings = settings.model_copy(update={"task": task.name})
    seed = _seed(settings, task)
    if seed is not None:  # recorded by its path, so a resumed run finds it whatever runs_dir it is given
        settings = settings.model_copy(
            update={"seed": SeedConfig(run=str(seed.folder.path.resolve()), turn=seed.turn.index)}
        )
    run_id = check_run_id(settings.run_id) if settings.run_id else new_run_id(task.name, str(settings.arch))
    journal = Journal(run_id, quiet)
    if note:
        journal.say(note)
    policy = make_policy(settings, task, settings.arch, journal)
    record = {
        **settings.model_dump(mode="json"),
        "task_version": task.version,
        "catalog_version": CATALOG_VERSION,
        "run_id": run_id,
        "policy": policy.describe(),
        "created_at": _now(),
        "toolchain": vars(toolchain()),
        **({"seed_attempt": seed.record()} if seed is not None else {}),
        **({"notes_sha256": notes_sha256(settings.feedback.notes)} if settings.feedback.notes else {}),
        **(labels or {}),
    }
    hold = contextlib.ExitStack()  # the run folder's lock, taken as the folder is made
    folder = RunFolder.create(settings.runs_dir, run_id, record, hold)
    return Prepared(settings, task, folder, policy, journal, resumed=False, seed=seed, hold=hold)


def resume(run_id: str, changes: Mapping[str, Any] | None = None, quiet: bool = False) -> Prepared:
    """A killed run continued, or a finished one extended. `changes`: settings by their dotted keys, laid over
    what the run recorded (only RESUMABLE ones: its limits, how to reach the endpoint and the GPUs), e.g.
    {"max_turns": 12}; a change of runs_dir says where the run is."""
    changes = dict(changes or {})
    refused = sorted(k for k in changes if k not in RESUMABLE)
    if refused:
        raise ConfigError(
            f"a resumed run cannot change {', '.join(refused)}; it may change only {', '.join(sorted(RESUMABLE))}"
        )
    folder = RunFolder.open(changes.get("runs_dir", setting_default("runs_dir")), check_run_id(run_id))
    with contextlib.ExitStack() as stack:  # released here if anything below refuses the run
        stack.enter_context(folder.lock())  # before anything is read: another process may be writing
        folder.refuse_links()
        _check_checkpoints(folder)
        folder.turns()  # a broken line is refused now, naming it, not halfway through the run
        recorded = folder.config()
        saved = recorded.model_dump(mode="json", exclude_unset=True)  # as written, no defaults added
        before = {k: v for k, v in saved.items() if k in SolveConfig.model_fields}
        settings = cli.validated(SolveConfig, cli.tree(SolveConfig, changes, base=before))
        if URL_MASK in getattr(settings.llm, "base_url", "") and "llm.base_url" not in changes:
            raise ConfigError(f"{folder.path}: its llm.base_url held credentials, which are never written down: "
                              f"give it again (resume={run_id} llm.base_url=URL)")  # fmt: skip
        task = _task(settings.task)
        if recorded.task_version != task.version:
            raise ConfigError(
                f"{folder.path} solved definition v{recorded.task_version} of {recorded.task}; today's {task.name} "
                f"is v{task.version}, so resuming would mix two workloads in one run: start a new run instead"
            )
        journal = Journal(folder.run_id, quiet)
        policy = make_policy(settings, task, settings.arch, journal)
        hold = stack.pop_all()
    changed = _changed(before, settings, changes)
    if changed:  # a resume that changes nothing leaves config.json as it was
        resumes = [*saved.get("resumed", []), {"at": _now(), "changed": changed}]
        updated = {**saved, **settings.model_dump(mode="json"), "resumed": resumes}
        folder.write_config({k: v for k, v in updated.items() if k != "format_version"})
    return Prepared(settings, task, folder, policy, journal, resumed=True, seed=_seed(settings, task), hold=hold)


def _check_checkpoints(folder: RunFolder) -> None:
    if not folder.checkpoints_path.is_file():
        raise RunFolderError(f"{folder.path} has no checkpoints.sqlite, so it cannot be resumed")
    check_database(folder.checkpoints_path)  # read-only: a check must not change the file


def _changed(saved: dict[str, Any], settings: SolveConfig, changes: dict[str, Any]) -> dict[str, Any]:
    """The given settings whose values differ from the saved ones (where the run lives is not a setting)."""
    try:
        before = cli.validated(SolveConfig, saved).model_dump(mode="json")
    except ConfigError:  # the saved settings are no longer valid: the given ones repair them
        before = {}
    after = settings.model_dump(mode="json")

    def at(tree: dict[str, Any], key: str) -> Any:
        for part in key.split("."):
            tree = tree.get(part) if isinstance(tree, dict) else None
        return tree

    return {k: v for k, v in changes.items() if k != "runs_dir" and (not before or at(before, k) != at(after, k))}


def _seed(settings: SolveConfig, task: Task) -> Seed | None:
    return load_seed(settings.seed, settings.runs_dir, task, settings.arch) if settings.seed else None


def _task(name: str) -> Task:
    try:
        return get_task(name)
    except UnknownName as e:
        raise ConfigError(str(e)) from None


def execute(run: Prepared, gpu: Gpu | None = None) -> int:
    """Run the loop to its end and report. `gpu` is one the caller shares among runs (a pool) and closes
    itself, or a stand-in (tests); without it the run opens and closes its own."""
    with run.hold:
        return _execute(run, gpu)


def _execute(run: Prepared, gpu: Gpu | None) -> int:
    settings, folder, journal, policy = run.settings, run.folder, run.journal, run.policy
    own_gpu = gpu is None
    gpu = open_gpu(settings.eval.pool, settings.eval.device, settings.eval.gpu) if gpu is None else gpu
    ctx = RunContext(
        task=run.task,
        arch=settings.arch,
        settings=settings,
        options=settings.eval.options(settings.target_speedup),
        policy=policy,
        gpu=gpu,
        folder=folder,
        journal=journal,
        system_prompt=system_prompt(settings.arch, parse_prompt(settings.prompt)),
        task_prompt=task_prompt(
            run.task,
            settings.arch,
            trials=settings.eval.options(settings.target_speedup).for_family(run.task.family).trials,
            target_speedup=settings.target_speedup,
            max_turns=settings.max_turns,
            tools=(settings.max_tool_calls, settings.max_evaluations) if settings.mode == "tools" else None,
            criterion=settings.eval.criterion,
        ),
        notes=NoteIndex.of(settings.feedback),
    )
    if run.seed is not None:  # the conversation the seed's attempt answered, word for word
        ctx.system_prompt, ctx.task_prompt = run.seed.system_prompt, run.seed.task_prompt
    conn = sqlite3.connect(folder.checkpoints_path, check_same_thread=False)
    code, reason, detail, noop = 0, None, None, False
    try:
        ctx.gpu_unavailable = gpu.unavailable_reason(settings.arch)  # once per run; the pool may be out of reach
        _header(ctx, run.resumed, run.seed)
        graph = build_graph(SqliteSaver(conn, serde=LoopSerializer()))
        thread: dict[str, Any] = {"configurable": {"thread_id": folder.run_id}}  # LangGraph's run config
        go, start = _starting_input(graph, thread, ctx, run.seed.history() if run.seed else [])
        if go:
            journal.attach(folder.events_path)
            _cut_torn_tail(ctx)
            thread["recursion_limit"] = _recursion_limit(settings, graph.get_state(thread).values)
            final = graph.invoke(start, thread, context=ctx, durability="sync")
            reason = final.get("stop_reason")
        else:  # nothing to do: nothing in the run folder changes
            noop = True
            reason = _finished(graph.get_state(thread).values, settings, policy)
            journal.say(f"run {folder.run_id} had already finished ({reason}); nothing to do")
    except ModelError as e:
        code, reason, detail = 1, "model_error", str(e)
    except ConfigError as e:
        code, reason, detail = 2, "config_error", str(e)
    except Interrupted as e:  # the pool lost the attempt (a worker, a host, the scheduler): its turn is not recorded
        code, reason, detail = 1, "error", str(e)
    except KeyboardInterrupt:
        code, reason, detail = 130, "interrupted", "interrupted by the user"
    except Exception as e:  # a harness or loop bug: keep the run resumable and say where it broke
        code, reason, detail = 1, "error", f"{type(e).__name__}: {e}"
        journal.attach(folder.events_path)
        journal.event("run.crashed", traceback=traceback.format_exc())
    finally:
        if own_gpu:
            gpu.close()
        policy.close()
        conn.close()
    if noop:
        summary = folder.summary() or summarize(folder.turns(), target_speedup=settings.target_speedup,
                                                stop_reason=reason)  # fmt: skip
        if not journal.quiet:
            print(summary_table(summary, folder))
        return code
    journal.attach(folder.events_path)
    detail = redact(detail)
    summary = write_summary(ctx, reason, detail)
    journal.event("run.done", stop_reason=reason, detail=detail, outcome=summary.outcome.value)
    if detail:
        journal.say(f"stopped: {detail}")
        if code != 2:
            journal.say(f"resume with: python -m agent.solve resume={folder.run_id} runs_dir={folder.path.parent}")
    if not journal.quiet:
        print(summary_table(summary, folder))
    journal.close()
    return code


def _recursion_limit(settings: SolveConfig, values: dict[str, Any]) -> int:
    """Steps the rest of the run may take: five a turn; in tools mode a reply and a call per tool call (no reply
    without a call goes uncounted), and the reply a spent budget asks for."""
    if settings.mode == "tools":
        return 2 * (settings.max_tool_calls - values.get("tool_calls", 0) + 3) + 10
    return STEPS_PER_TURN * (settings.max_turns - len(values.get("results", [])) + 1) + 10


def _finished(values: dict[str, Any], settings: SolveConfig, policy: Policy) -> str | None:
    """Why a run whose graph has nothing left to do ended."""
    if values.get("mode") == "tools":
        return values.get("stop_reason")
    return stop_reason(values.get("results", []), settings, policy.max_answers)


def _cut_torn_tail(ctx: RunContext) -> None:
    """A run killed while writing a turn's line left it torn: cut it, so the turn is written again whole."""
    cut = ctx.folder.cut_torn_tail()
    if cut:
        ctx.journal.event("trajectory.torn_tail_cut", bytes=cut, kept_in="trajectory.torn")
        ctx.journal.say(f"  trajectory.jsonl ended in a torn line ({cut:,} bytes): cut, kept in trajectory.torn")


def _starting_input(graph: Any, thread: dict[str, Any], ctx: RunContext, seeded: list[Exchange]) -> tuple[bool, Any]:
    """(whether to run the graph, its input): a fresh state for a new run (its history opened by the seed's
    attempt, if any); None to continue a killed one from its checkpoint; a jump back to `generate` for a
    finished run whose new limits allow more turns; and (False, None) for a run that has finished for good."""
    snapshot = graph.get_state(thread)
    recorded = len(ctx.folder.turns())
    if not snapshot.values:
        if recorded:
            raise ConfigError(f"{ctx.folder.path} holds {recorded} turns but no checkpoint to resume from")
        return True, {"turn": 0, "stop_reason": None, "mode": ctx.settings.mode,
                      **({"history": seeded} if seeded else {})}  # fmt: skip
    done = len(snapshot.values.get("results", []))
    if recorded > done + 1:  # only the turn whose feedback step was cut short may be ahead of the checkpoint
        raise ConfigError(f"{ctx.folder.path}: {recorded} turns recorded but the checkpoint has {done}")
    if snapshot.next:
        ctx.journal.event("run.resume", turn=snapshot.values.get("turn"), step=snapshot.values.get("step"),
                          next=list(snapshot.next))  # fmt: skip
        return True, None
    if snapshot.values.get("mode") == "tools":  # a tools run ends once: at its submission or its budget
        return False, None
    if stop_reason(snapshot.values.get("results", []), ctx.settings, ctx.policy.max_answers):
        return False, None
    ctx.journal.event("run.extend", turns_done=done)
    return True, Command(goto="generate", update={"stop_reason": None})


def _header(ctx: RunContext, resumed: bool, seed: Seed | None) -> None:
    say = ctx.journal.say
    verb = "resuming" if resumed else "run"
    settings = ctx.settings
    limits = (f"tools mode, up to {settings.max_tool_calls} tool calls and {settings.max_evaluations} GPU "
              "evaluations" if settings.mode == "tools" else f"up to {settings.max_turns} turns")  # fmt: skip
    say(f"{verb} {ctx.folder.run_id}: {ctx.task.name} on {ctx.arch}, {limits}")
    say(f"  llm: {ctx.policy.describe()}")
    if seed is not None:
        say(f"  seeded with turn {seed.turn.index} of {seed.folder.path} ({seed.turn.evaluation.status.value})")
    missing = ctx.gpu_unavailable
    say(f"  GPU stages: {'skipped (' + missing + '); attempts can at best be unverified' if missing else 'on'}")
    ctx.journal.event("run.start", resumed=resumed, policy=ctx.policy.describe(), gpu_unavailable=missing)


def summary_table(summary: RunSummary, folder: RunFolder) -> str:
    rows = [("turn", "status", "outcome", "speedup", "targets", "tokens", "model s", "eval s")]
    for r in summary.per_turn:
        rows.append(
            (
                str(r.turn),
                r.status.value,
                r.outcome.value,
                f"{r.speedup:.3f}×" if r.speedup is not None else "-",
                {True: "met", False: "missed", None: "-"}[r.targets_met],
                f"{r.prompt_tokens + r.completion_tokens:,}",
                f"{r.model_seconds:.1f}",
                f"{r.eval_seconds:.1f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    best, speedup = summary.best_turn, summary.best_speedup
    stop = summary.stop_reason.value if summary.stop_reason else None
    lines += [
        "",
        f"outcome: {summary.outcome.value}  best turn: {best if best is not None else '-'}  "
        f"best speedup: {f'{speedup:.3f}×' if speedup is not None else '-'}  stop: {stop}",
        f"run folder: {folder.path}",
    ]
    if summary.tools is not None:
        lines.insert(-1, tools_line(summary.tools))
    return "\n".join(lines)


def tools_line(tools: ToolsOutcome) -> str:
    """A tools-mode run's end and spend, in words: whether the model submitted, or was scored by its best."""
    how = (f"submitted at step {tools.step}" if tools.submitted else
           "not submitted: scored by its best evaluated answer" + (f" (step {tools.step})" if tools.step else
                                                                   " (none)"))  # fmt: skip
    asked = f"; {tools.budget} asked it to submit" if tools.budget else ""
    return (f"tools: {how}{asked}; {tools.replies} replies, {tools.tool_calls} tool calls ({tools.refused} "
            f"refused), {tools.evaluations} GPU evaluations")  # fmt: skip


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
