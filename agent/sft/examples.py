"""Run folders → candidate SFT examples in the chat format: fix-it pairs (a failed attempt, its feedback,
the passing attempt that followed) and kernel-generation examples (a passing attempt), each with where it
came from. Prompts are taken from the recorded turns, word for word, never re-rendered: the data is what
the model saw.

A fix-it pair is a passed turn whose previous attempt failed: the turn before it in the same run, or, for
the first turn of a seeded run (agent.mine_repairs), the seed's attempt from another model. Its messages
are the recorded turn's own: system, task prompt, the failed attempt and its feedback (the last two
messages it was sent), then the passing answer. Earlier turns of a full-history run are left out: the
pair teaches repairing one attempt from its feedback. `unverified` (GPU stages skipped) is not a failure:
the attempt may have been right, so it never starts a pair. A turn whose reply was too large to keep whole
(Turn.cuts) is in no example, as the answer or as the failed attempt: its recorded text is not what the
model wrote.

tools: a tools-mode run (mode=tools) that submitted a passing answer, as the tool-calling conversation it was:
system, task prompt, then each reply as an assistant message with its `tool_calls` (weight 1: the whole
trajectory is the behaviour taught), each result as a `tool` message (its `tool_call_id`), and the loop's
notices as user messages; the tools' JSON schemas go in the line's `tools` field, as TRL's SFTTrainer reads a
tool-calling dataset.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from agent.loop.records import Message, PolicyRecord, ReplyStep, RunConfig, ToolStep, Trajectory, Turn
from agent.loop.store import RunFolder
from agent.loop.tokens import count_messages, count_text
from agent.loop.toolcalls import TOOLS, assistant_message, tool_message
from tools.answer import AnswerError, extract_solution
from tools.evaluation import Status
from tools.ptx import COMMENT

Kind = Literal["fixit", "kernelgen", "tools"]
KINDS: tuple[Kind, ...] = ("fixit", "kernelgen", "tools")
FAILED = frozenset(Status) - {Status.PASSED, Status.UNVERIFIED}
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Origin:
    """One attempt: the run and turn that recorded it, and the model that wrote it."""

    run_id: str
    turn: int
    model: str


@dataclass(frozen=True)
class Example:
    """One training conversation and what the filters and the data card need to know about it."""

    id: str
    kind: Kind
    task: str
    arch: str
    messages: list[dict[str, Any]]
    answer: Origin  # the attempt that carries the loss
    wrong: Origin | None  # fixit: the failed attempt it repairs
    error_class: str | None  # fixit: the failed attempt's status
    speedup: float | None
    targets_met: bool | None
    dedup_key: str
    tokens: int
    tools: list[dict[str, Any]] | None = None  # the tools format: the function schemas the model was offered

    @property
    def mined(self) -> bool:
        """A teacher's repair of another run's attempt (agent.mine_repairs), not a model fixing its own."""
        return self.wrong is not None and self.wrong.run_id != self.answer.run_id

    def line(self) -> dict[str, Any]:
        """The JSONL object: `messages` (and `tools`) for the trainer, `metadata` for people and analysis."""
        return {
            "messages": self.messages,
            **({"tools": self.tools} if self.tools is not None else {}),
            "metadata": {
                "id": self.id,
                "format": self.kind,
                "task": self.task,
                "arch": self.arch,
                "error_class": self.error_class,
                "speedup": self.speedup,
                "targets_met": self.targets_met,
                "tokens": self.tokens,
                "answer": vars(self.answer),
                "wrong": vars(self.wrong) if self.wrong else None,
                "mined": self.mined,
            },
        }


def normalize_source(source: str) -> str:
    """PTX or CUDA with comments and all whitespace removed: two answers that differ only there are one."""
    return _SPACE.sub("", COMMENT.sub("", source))


def answer_key(text: str) -> str:
    """What makes an answer distinct: its language, normalised source and launch spec, or, when it holds
    no solution, its text without whitespace."""
    try:
        solution = extract_solution(text)
    except AnswerError:
        return "text:" + _SPACE.sub("", text)
    return f"{solution.language}:{normalize_source(solution.source)}:{solution.launch.model_dump_json()}"


def with_reasoning(turn: Turn) -> str:
    """The answer as the trained model should write it: the recorded reasoning, if any, in <think> tags."""
    if turn.reasoning and turn.reasoning.strip():
        return f"<think>\n{turn.reasoning.strip()}\n</think>\n\n{turn.response}"
    return turn.response


def examples(trajectory: Trajectory, kind: Kind) -> list[Example]:
    """Every candidate of `kind` in one run, before any filter."""
    config = trajectory.config
    model = config.llm.model_name
    if kind == "tools":
        return [_tools(trajectory, model)] if _submitted_pass(trajectory) else []
    seed = config.seed_attempt
    previous = None
    if seed is not None:
        seed_model = PolicyRecord.model_validate(seed.get("llm") or {}).model_name
        previous = Origin(seed["run_id"], seed["turn"], seed_model), seed["status"], bool(seed.get("cut"))
    found = []
    for turn in trajectory.turns:
        here = Origin(trajectory.run_id, turn.index, model)
        if turn.evaluation.status is Status.PASSED and not turn.cuts:
            if kind == "kernelgen" and _has_prompts(turn):
                found.append(_kernelgen(config, turn, here))
            elif previous is not None and previous[1] in FAILED and not previous[2] and _has_feedback_turn(turn):
                found.append(_fixit(config, turn, here, *previous[:2]))
        previous = here, turn.evaluation.status.value, bool(turn.cuts)
    return found


@dataclass(frozen=True)
class Collected:
    """Candidates from every run folder, ordered by task, arch and id; the folders that could not be read, each
    with why; and, per reason (lacks), how many readable runs gave no candidate."""

    candidates: list[Example]
    skipped: list[str]
    lacking: dict[str, int]


def collect(folders: list[RunFolder], kind: Kind) -> Collected:
    """The candidates of `kind` in `folders`, and why the others gave none."""
    found: list[Example] = []
    skipped, lacking = [], Counter()
    for folder in folders:
        try:
            trajectory = folder.trajectory()
        except (OSError, ValueError, KeyError) as e:  # RunFolderError and pydantic's are ValueErrors
            skipped.append(f"{folder.path}: {e}")
            continue
        mine = examples(trajectory, kind)
        found += mine
        if not mine:
            lacking[lacks(trajectory, kind)] += 1
    return Collected(sorted(found, key=lambda e: (e.task, e.arch, e.id)), skipped, dict(lacking.most_common()))


def lacks(trajectory: Trajectory, kind: Kind) -> str:
    """What a run that gives no candidate of `kind` lacked, in the words the exporter prints."""
    statuses = [t.evaluation.status for t in trajectory.turns]
    if not statuses:
        return "no attempt"
    if kind == "tools":
        outcome = trajectory.turns[-1].tools
        if outcome is None:
            return "not a tools-mode run (mode=tools)"
        return "submission not passed" if outcome.submitted else "never submitted"
    if Status.PASSED not in statuses:
        if Status.UNVERIFIED in statuses:
            return "no GPU verdict (attempts unverified: evaluated without a GPU of the arch)"
        return "no passed attempt"
    if all(t.cuts for t in trajectory.turns if t.evaluation.status is Status.PASSED):
        return "passed attempts too large to keep whole"
    if kind == "kernelgen":
        return "passed attempts without their prompts recorded"
    return "no failed attempt right before a passed one (unverified is not a failure)"


def _has_prompts(turn: Turn) -> bool:
    """The turn records the system and task prompts it was sent, first (a turn that does not teaches nothing)."""
    return [m.role for m in turn.messages[:2]] == ["system", "user"]


def _has_feedback_turn(turn: Turn) -> bool:
    """The turn was sent an earlier answer and its feedback (its last two messages) after the prompts."""
    roles = [m.role for m in turn.messages]
    return len(roles) >= 4 and _has_prompts(turn) and roles[-2:] == ["assistant", "user"]


def _fixit(config: RunConfig, turn: Turn, answer: Origin, wrong: Origin, status: str) -> Example:
    sent = turn.messages
    messages = [
        {"role": "system", "content": sent[0].content},
        {"role": "user", "content": sent[1].content},
        {"role": "assistant", "content": sent[-2].content, "weight": 0},
        {"role": "user", "content": sent[-1].content},
        {"role": "assistant", "content": with_reasoning(turn), "weight": 1},
    ]
    key = f"{answer_key(sent[-2].content)}|{answer_key(turn.response)}"
    return _example("fixit", config, turn, messages, answer, wrong, status, key)


def _kernelgen(config: RunConfig, turn: Turn, answer: Origin) -> Example:
    sent = turn.messages
    messages = [
        {"role": "system", "content": sent[0].content},
        {"role": "user", "content": sent[1].content},
        {"role": "assistant", "content": with_reasoning(turn), "weight": 1},
    ]
    return _example("kernelgen", config, turn, messages, answer, None, None, answer_key(turn.response))


def _tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    if tools:  # tool calls and results have no chat-message count: the conversation's JSON, counted whole
        return count_text(json.dumps(messages, ensure_ascii=False))
    return count_messages([Message(role=m["role"], content=m["content"]) for m in messages])


def _submitted_pass(trajectory: Trajectory) -> bool:
    final = trajectory.turns[-1] if trajectory.turns else None
    return bool(final and final.tools and final.tools.submitted and final.evaluation.status is Status.PASSED)


def _tools(trajectory: Trajectory, model: str) -> Example:
    """The run's conversation as the model held it, rebuilt from its steps (the chat-completions shape)."""
    final = trajectory.turns[-1]
    messages: list[dict[str, Any]] = [{"role": m.role, "content": m.content} for m in final.messages[:2]]
    results = {(s.step, s.call): s for s in trajectory.steps if isinstance(s, ToolStep)}
    for reply in (s for s in trajectory.steps if isinstance(s, ReplyStep)):
        if reply.notice:
            messages.append({"role": "user", "content": reply.notice})
        text = f"<think>\n{reply.reasoning.strip()}\n</think>\n\n{reply.content}" if reply.reasoning else reply.content
        messages.append({**assistant_message(text, reply.tool_calls), "weight": 1})
        messages += [tool_message(c, results[reply.step, n].result) for n, c in enumerate(reply.tool_calls)
                     if (reply.step, n) in results]  # fmt: skip
    answer = Origin(trajectory.run_id, final.index, model)
    return _example("tools", trajectory.config, final, messages, answer, None, None, answer_key(final.response),
                    tools=TOOLS)  # fmt: skip


def _example(
    kind: Kind,
    config: RunConfig,
    turn: Turn,
    messages: list[dict[str, Any]],
    answer: Origin,
    wrong: Origin | None,
    error_class: str | None,
    key: str,
    tools: list[dict[str, Any]] | None = None,
) -> Example:
    task, arch = config.task, config.arch
    return Example(
        id=f"{answer.run_id}/turn_{answer.turn:02d}",
        kind=kind,
        task=task,
        arch=arch,
        messages=messages,
        answer=answer,
        wrong=wrong,
        error_class=error_class,
        speedup=turn.evaluation.speedup,
        targets_met=turn.evaluation.targets_met,
        dedup_key=f"{task}|{arch}|{key}",
        tokens=_tokens(messages, tools),
        tools=tools,
    )
