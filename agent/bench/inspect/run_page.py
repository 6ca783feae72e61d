"""What a run page shows: the run's header and prompt, a speedup-by-turn chart, and one section per turn —
its stages with their seconds, the feedback as the model saw it, the answer's source (coloured) and its diff
against earlier turns, the launch spec, per-kernel resources, target instructions found and executed, the
opcode mix, where the time goes (the perf pass, beside the library's kernels), the metrics, tokens and model
time, and the reasoning where recorded. A tools-mode run's page shows its steps first: each reply (its text,
the notice the loop sent before it) and each tool call with its arguments and the result the model read.

Stage details are read through the harness's own models (tools/assemble.py, tools/sass.py); a detail of
another shape is still shown, as JSON, with every stage's full detail."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from agent.bench import score
from agent.bench.inspect.diff import Diff, line_diff
from agent.bench.inspect.views import LoadedRun, RunCard, Text, json_text, text
from agent.loop.records import ReplyStep, RunConfig, RunSummary, Step, ToolsOutcome, ToolStep, Turn
from agent.loop.redact import redact
from agent.loop.summary import turn_outcome
from tools.assemble import KernelResources
from tools.evaluation import Stage
from tools.gpu.perf import comparison_notes, comparison_rows
from tools.sass import KernelSass, TargetPresence
from tools.solution import Launch

T = TypeVar("T")
OPCODES_SHOWN = 12
# The profile detail's keys this page lays out itself; any other (diagnostics added later) is shown as JSON.
PROFILE_SHOWN = {"target_counts", "target_thread_counts", "target_variants", "targets_met", "paper_tag",
                 "opcode_mix", "instructions", "launches_profiled"}  # fmt: skip
KERNELS = TypeAdapter(list[KernelResources])
SASS_KERNELS = TypeAdapter(list[KernelSass])
PRESENCE = TypeAdapter(dict[str, TargetPresence])
COUNTS = TypeAdapter(dict[str, int])
VARIANTS = TypeAdapter(dict[str, dict[str, int]])
MIX = TypeAdapter(list[tuple[str, int, float]])


@dataclass(frozen=True)
class StageView:
    name: str
    state: str
    seconds: float
    message: str
    share: float  # of the evaluation's seconds, in percent
    detail: Text | None


@dataclass(frozen=True)
class KernelRow:
    """A compiled kernel: ptxas's resources, the SASS summary, and the dynamic shared memory it is launched with."""

    name: str
    resources: KernelResources | None
    sass: KernelSass | None
    dynamic_shared: int | None


@dataclass(frozen=True)
class TargetRow:
    """A target instruction group: found in the PTX and SASS (static), executed (Nsight Compute, warp-level and
    predicate-true threads), and its most executed variants."""

    group: str
    in_ptx: bool | None
    in_sass: int | None
    executed: int | None
    threads: int | None
    variants: str


@dataclass(frozen=True)
class OpcodeShare:
    opcode: str
    count: int
    share: float


@dataclass(frozen=True)
class PerfView:
    """The perf pass's table as the model read it (tools/gpu/perf.py), laid out as HTML."""

    header: list[str]
    rows: list[list[str]]
    notes: list[str]


@dataclass(frozen=True)
class TurnView:
    turn: Turn
    status: str
    outcome: str
    stages: list[StageView]
    response: Text
    reasoning: Text | None
    feedback: Text | None
    source: Text | None
    launch: Text | None
    launches: list[Launch]
    diffs: list[Diff]  # against each earlier turn that had a source, the latest first
    kernels: list[KernelRow]
    targets: list[TargetRow]
    opcodes: list[OpcodeShare]
    opcodes_executed: bool  # the mix is Nsight Compute's executed counts, not the static SASS histogram
    profile_extra: Text | None
    perf: PerfView | None
    baseline_library: str | None


@dataclass(frozen=True)
class Bar:
    """One turn in the speedup chart (SVG user units); `speedup` None: a stub in the turn's status colour."""

    turn: int
    x: float
    y: float
    width: float
    height: float
    status: str
    speedup: float | None


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    left: int
    base: float  # the y of speedup 0
    bars: list[Bar]
    rules: list[tuple[float, str]]  # (y, label): the baseline (1×) and the run's target speedup

    @property
    def timed(self) -> bool:
        """Whether any turn has a speedup to draw."""
        return any(bar.speedup is not None for bar in self.bars)


@dataclass(frozen=True)
class CallView:
    """A tool call of a reply and what the model read back; `verdict` its evaluation's status, or why refused."""

    index: int
    name: str
    arguments: Text
    result: Text
    verdict: str
    refused: bool
    cached: bool
    gpu_evaluation: bool


@dataclass(frozen=True)
class StepView:
    """A tools-mode reply and its calls."""

    step: int
    notice: Text | None
    content: Text | None
    reasoning: Text | None
    tokens: int
    model_seconds: float
    calls: list[CallView]


@dataclass
class RunPage:
    card: RunCard
    summary: RunSummary
    config: RunConfig
    config_text: Text
    prompt: list[tuple[str, Text]]
    turns: list[TurnView]
    chart: Chart
    back: str | None
    summary_derived: bool
    steps: list[StepView]
    tools: ToolsOutcome | None


def run_page(run: LoadedRun, card: RunCard, back: str | None) -> RunPage:
    traj = run.traj
    target = traj.config.target_speedup
    first = traj.turns[0].messages if traj.turns else []
    shown = redact(traj.config.model_dump(mode="json"))  # a folder older versions wrote may hold credentials
    return RunPage(
        card=card,
        summary=run.summary,
        config=type(traj.config).model_validate(shown),
        config_text=json_text(shown),
        prompt=[(m.role, text(m.content)) for m in first],
        turns=[turn_view(t, traj.turns[:i], target) for i, t in enumerate(traj.turns)],
        chart=speedup_chart(traj.turns, target),
        back=back,
        summary_derived=traj.summary is None,
        steps=step_views(traj.steps),
        tools=traj.turns[-1].tools if traj.turns else None,
    )


def step_views(steps: list[Step]) -> list[StepView]:
    calls: dict[int, list[CallView]] = {}
    for s in steps:
        if isinstance(s, ToolStep):
            verdict = s.refused or (s.evaluation.status.value if s.evaluation else "ok")
            calls.setdefault(s.step, []).append(CallView(
                index=s.call, name=s.name, arguments=_arguments(s.arguments), result=text(s.result), verdict=verdict,
                refused=s.refused is not None, cached=s.cached, gpu_evaluation=s.gpu_evaluation,
            ))  # fmt: skip
    return [
        StepView(
            step=r.step,
            notice=text(r.notice) if r.notice else None,
            content=text(r.content) if r.content else None,
            reasoning=text(r.reasoning) if r.reasoning else None,
            tokens=r.prompt_tokens + r.completion_tokens,
            model_seconds=r.model_seconds,
            calls=calls.get(r.step, []),
        )
        for r in steps
        if isinstance(r, ReplyStep)
    ]


def _arguments(raw: str) -> Text:
    """A call's arguments: the answer inside shown as the Markdown it is, the rest as JSON; malformed JSON as sent."""
    try:
        value = json.loads(raw)
    except ValueError:
        return text(raw)
    if isinstance(value, dict) and isinstance(value.get("answer"), str):
        rest = {k: v for k, v in value.items() if k != "answer"}
        return text((json.dumps(rest) + "\n\n" if rest else "") + value["answer"])
    return json_text(value)


def turn_view(turn: Turn, earlier: list[Turn], target_speedup: float) -> TurnView:
    ev, solution = turn.evaluation, turn.solution
    details = {s.name: s.detail for s in ev.stages}
    opcodes, executed = _opcodes(details)
    extra = {k: v for k, v in details.get(Stage.PROFILE, {}).items() if k not in PROFILE_SHOWN}
    library = details.get(Stage.TIME, {}).get("baseline_library")
    return TurnView(
        turn=turn,
        status=score.ERROR_CLASS[ev.status],
        outcome=str(turn_outcome(turn, target_speedup)),
        stages=_stages(turn),
        response=text(turn.response),
        reasoning=text(turn.reasoning) if turn.reasoning else None,
        feedback=text(turn.feedback) if turn.feedback is not None else None,
        source=text(solution.source, solution.language) if solution else None,
        launch=json_text(solution.launch.model_dump(mode="json")) if solution else None,
        launches=list(solution.launch.launches) if solution else [],
        diffs=_diffs(turn, earlier),
        kernels=_kernels(turn, details),
        targets=_targets(turn, details),
        opcodes=opcodes,
        opcodes_executed=executed,
        profile_extra=json_text(extra) if extra else None,
        perf=PerfView(*comparison_rows(ev.perf), comparison_notes(ev.perf)) if ev.perf else None,
        baseline_library=library if isinstance(library, str) else None,
    )


def _stages(turn: Turn) -> list[StageView]:
    stages = turn.evaluation.stages
    total = sum(s.seconds for s in stages) or 1.0
    return [
        StageView(name=str(s.name), state=str(s.state), seconds=s.seconds, message=s.message,
                  share=100 * s.seconds / total, detail=json_text(s.detail) if s.detail else None)
        for s in stages
    ]  # fmt: skip


def _diffs(turn: Turn, earlier: list[Turn]) -> list[Diff]:
    if turn.solution is None:
        return []
    source = turn.solution.source
    return [line_diff(t.solution.source, source, t.index, turn.index) for t in reversed(earlier) if t.solution]


def _typed(adapter: TypeAdapter[T], value: Any) -> T | None:
    """`value` as the harness's model reads it, or None when it is absent or of another shape."""
    if value is None:
        return None
    try:
        return adapter.validate_python(value)
    except ValidationError:
        return None


def _kernels(turn: Turn, details: dict[Stage, dict[str, Any]]) -> list[KernelRow]:
    resources = {k.name: k for k in _typed(KERNELS, details.get(Stage.COMPILE, {}).get("kernels")) or []}
    sass = {k.name: k for k in _typed(SASS_KERNELS, details.get(Stage.SASS, {}).get("kernels")) or []}
    shared: dict[str, int] = {}
    for launch in turn.solution.launch.launches if turn.solution else []:
        shared[launch.kernel] = max(shared.get(launch.kernel, 0), launch.shared_bytes)
    names = list(dict.fromkeys([*resources, *sass]))
    return [KernelRow(n, resources.get(n), sass.get(n), shared.get(n)) for n in names]


def _targets(turn: Turn, details: dict[Stage, dict[str, Any]]) -> list[TargetRow]:
    presence = _typed(PRESENCE, details.get(Stage.SASS, {}).get("targets")) or {}
    profile = details.get(Stage.PROFILE, {})
    executed = turn.evaluation.target_counts or {}
    threads = _typed(COUNTS, profile.get("target_thread_counts")) or {}
    variants = _typed(VARIANTS, profile.get("target_variants")) or {}
    rows = []
    for group in dict.fromkeys([*presence, *executed]):
        found = presence.get(group)
        top = list(variants.get(group, {}).items())[:3]
        rows.append(TargetRow(
            group=group,
            in_ptx=found.ptx if found else None,
            in_sass=sum(found.sass_matches.values()) if found else None,
            executed=executed.get(group),
            threads=threads.get(group),
            variants=", ".join(f"{op} {n:,}" for op, n in top),
        ))  # fmt: skip
    return rows


def _opcodes(details: dict[Stage, dict[str, Any]]) -> tuple[list[OpcodeShare], bool]:
    """The executed opcode mix (profile), or else the static SASS histogram; and whether it was executed."""
    mix = _typed(MIX, details.get(Stage.PROFILE, {}).get("opcode_mix"))
    if mix:
        return [OpcodeShare(op, n, share) for op, n, share in mix[:OPCODES_SHOWN]], True
    static: Counter[str] = Counter()
    for kernel in _typed(SASS_KERNELS, details.get(Stage.SASS, {}).get("kernels")) or []:
        static.update(kernel.opcodes)
    total = sum(static.values()) or 1
    return [OpcodeShare(op, n, 100 * n / total) for op, n in static.most_common(OPCODES_SHOWN)], False


def speedup_chart(turns: list[Turn], target_speedup: float, width: int = 640, height: int = 200) -> Chart:
    """Bars of each turn's speedup (correct, timed turns), stubs for the others; the baseline and target lines."""
    left, right, top, bottom = 44, 12, 14, 24
    speedups = [t.evaluation.speedup for t in turns if t.evaluation.speedup is not None]
    ceiling = 1.15 * max([*speedups, target_speedup, 1.0])
    plot_h = height - top - bottom
    base = top + plot_h
    slot = (width - left - right) / max(len(turns), 1)
    bars = []
    for i, t in enumerate(turns):
        s = t.evaluation.speedup
        h = plot_h * s / ceiling if s is not None else 3.0
        bar_w = min(40.0, slot * 0.7)
        bars.append(Bar(turn=t.index, x=left + slot * i + (slot - bar_w) / 2, y=base - h, width=bar_w, height=h,
                        status=score.ERROR_CLASS[t.evaluation.status], speedup=s))  # fmt: skip
    rules = [(base - plot_h * 1.0 / ceiling, "1×")]
    if target_speedup != 1.0:
        rules.append((base - plot_h * target_speedup / ceiling, f"target {target_speedup:g}×"))
    return Chart(width=width, height=height, left=left, base=base, bars=bars, rules=rules)
