"""Policies that need no network: the task's reference solution, scripted fixtures, and the replay of a
recorded run. Each answers by turn number and has a known number of answers, after which the run ends.

A scripted fixture is a JSON list; each item is an answer's text, or an object:
  {"text": "...", "reasoning": "...", "finish_reason": "length", "delay_s": 2}
  {"file": "turn_02.md"}           (text from a file in the fixture's own folder: a name, not a path)
`delay_s` simulates the model's latency (for demos, and for tests that kill a run mid-turn).

In tools mode (mode=tools) an item is one model reply, and may call tools (its text is optional then):
  {"tool_calls": [{"name": "compile", "answer_file": "gemm.md"},
                  {"name": "sanitize", "arguments": {"tool": "racecheck"}, "answer_file": "gemm.md"},
                  {"name": "evaluate", "arguments": "{not json"}]}
`arguments` is an object or the raw string the model sent (malformed JSON stays malformed); `answer_file`, a file
beside the fixture, is put into the arguments as `answer`, or, with `"reference_answer": true`, the task's
reference answer on the run's arch (tasks/solutions: kept in one place, not copied into fixtures). The
reference policy's tools-mode replies are compile, evaluate, then submit of the reference answer.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agent.cli import ConfigError
from agent.loop.policies.base import Reply
from agent.loop.records import Message, ReplyStep, ToolCall
from agent.loop.store import RunFolder
from tasks.catalog import get_task
from tasks.schema import Arch, Task
from tasks.solutions import answer_key, answer_path, available, reference_answer
from tools.answer import format_validation_error
from tools.jsontext import JsonRefused, loads


class ReferencePolicy:
    """The task's reference answer, once: repeating it could not change the verdict."""

    max_answers = 1
    STEPS = ("compile", "evaluate", "submit")  # tools mode: look before submitting, as an agent would
    max_steps = len(STEPS)

    def __init__(self, task: Task, arch: Arch):
        self.text = reference_answer(task.name, arch)
        if self.text is None:
            keys = sorted({answer_key(get_task(t)) for t, a in available() if a == arch})
            have = ", ".join(keys) or "none yet"
            raise ConfigError(f"no reference solution for {task.name} on {arch}; definitions that have one: {have}")
        self.path = answer_path(task.name, arch)

    def describe(self) -> str:
        return f"reference ({self.path})"

    def respond(self, messages: list[Message], turn: int, max_tokens: int | None = None) -> Reply:
        return Reply(text=self.text, finish_reason="stop")

    def act(self, messages: list[dict[str, Any]], step: int, tools: list[dict[str, Any]],
            max_tokens: int | None = None) -> Reply:  # fmt: skip
        name = self.STEPS[step - 1]
        call = ToolCall(id=f"call_{step}_0", name=name, arguments=json.dumps({"answer": self.text}))
        return Reply(text="", finish_reason="tool_calls", tool_calls=(call,))

    def close(self) -> None:
        pass


class ScriptedCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    id: str | None = None
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    answer_file: str | None = Field(None, description="A file beside the fixture: the arguments' `answer`.")
    reference_answer: bool = Field(False, description="The task's reference answer as the arguments' `answer`.")

    @model_validator(mode="after")
    def _one_answer(self) -> ScriptedCall:
        if self.answer_file is not None and self.reference_answer:
            raise ValueError("give answer_file or reference_answer, not both")
        return self


class ScriptedAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str | None = None
    file: str | None = Field(None, description="A file beside the fixture holding the text.")
    reasoning: str | None = None
    finish_reason: str | None = "stop"
    delay_s: float = Field(0.0, ge=0, le=3600, allow_inf_nan=False)
    tool_calls: list[ScriptedCall] = Field(default_factory=list, description="Tools mode: the reply's calls.")

    @model_validator(mode="after")
    def _one_source(self) -> ScriptedAnswer:
        if self.text is not None and self.file is not None:
            raise ValueError("give exactly one of 'text' and 'file'")
        if self.text is None and self.file is None and not self.tool_calls:
            raise ValueError("give exactly one of 'text' and 'file' (or tool_calls)")
        return self


def _beside(fixture: Path, name: str, number: int) -> str:
    """The text of file `name` in the fixture's folder; a path elsewhere (/etc/…, ../…) is refused."""
    where = f"llm.path: {fixture}, answer {number}"
    source = fixture.parent / name
    if Path(name).name != name or source.resolve().parent != fixture.resolve().parent:
        raise ConfigError(f"{where}: 'file' must name a file beside the fixture, not a path ({name!r})")
    try:
        return source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{where}: cannot read {source}: {getattr(e, 'strerror', None) or e}") from None


def _of(label: str | None) -> str:
    return f" of {label}" if label else ""


class ScriptedPolicy:
    """Fixture answers, one per turn; `label` names the model that wrote them. `task` and `arch` are the run's,
    for calls that carry the reference answer."""

    def __init__(self, path: Path, label: str | None = None, task: Task | None = None, arch: Arch | None = None):
        self.path, self.label = path, label
        self.reference = reference_answer(task.name, arch) if task is not None and arch is not None else None
        try:
            items = loads(path.read_text(encoding="utf-8"))
        except OSError as e:
            raise ConfigError(f"llm.path: cannot read {path}: {e.strerror}") from None
        except (json.JSONDecodeError, JsonRefused, UnicodeDecodeError) as e:
            raise ConfigError(f"llm.path: {path} is not a JSON fixture we read: {e}") from None
        if not isinstance(items, list) or not items:
            raise ConfigError(f"llm.path: {path} must hold a non-empty JSON list of answers")
        self.answers: list[ScriptedAnswer] = []
        self.calls: list[tuple[ToolCall, ...]] = []
        for i, item in enumerate(items):
            try:
                answer = ScriptedAnswer(text=item) if isinstance(item, str) else ScriptedAnswer.model_validate(item)
            except ValidationError as e:
                raise ConfigError(f"llm.path: {path}, answer {i + 1}:\n{format_validation_error(e)}") from None
            if answer.file is not None:
                answer = answer.model_copy(update={"text": _beside(path, answer.file, i + 1), "file": None})
            self.answers.append(answer)
            self.calls.append(tuple(self._call(c, i + 1, n) for n, c in enumerate(answer.tool_calls)))
        self.max_answers = self.max_steps = len(self.answers)

    def describe(self) -> str:
        return f"scripted ({self.path}, {self.max_answers} answers{_of(self.label)})"

    def respond(self, messages: list[Message], turn: int, max_tokens: int | None = None) -> Reply:
        answer = self.answers[turn - 1]
        if answer.delay_s:
            time.sleep(answer.delay_s)
        return Reply(text=answer.text, reasoning=answer.reasoning, finish_reason=answer.finish_reason)

    def act(self, messages: list[dict[str, Any]], step: int, tools: list[dict[str, Any]],
            max_tokens: int | None = None) -> Reply:  # fmt: skip
        answer, calls = self.answers[step - 1], self.calls[step - 1]
        if answer.delay_s:
            time.sleep(answer.delay_s)
        finish = "tool_calls" if calls and answer.finish_reason == "stop" else answer.finish_reason
        return Reply(text=answer.text or "", reasoning=answer.reasoning, finish_reason=finish, tool_calls=calls)

    def close(self) -> None:
        pass

    def _call(self, call: ScriptedCall, number: int, position: int) -> ToolCall:
        """A fixture's call as the endpoint would send it: the arguments as a JSON string."""
        where = f"llm.path: {self.path}, answer {number}"
        arguments = call.arguments
        if call.answer_file is not None or call.reference_answer:
            if not isinstance(arguments, dict):
                raise ConfigError(f"{where}: an answer_file or reference_answer needs arguments as an object")
            if call.reference_answer and self.reference is None:
                raise ConfigError(f"{where}: reference_answer, but the run's task has no reference answer on its arch")
            answer = self.reference if call.reference_answer else _beside(self.path, call.answer_file, number)
            arguments = {**arguments, "answer": answer}
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return ToolCall(id=call.id or f"call_{number}_{position}", name=call.name, arguments=raw)


class ReplayPolicy:
    """A recorded run's answers in order; the prompts it is sent now may differ from the recorded ones,
    since today's harness may give different feedback."""

    def __init__(self, run: str, runs_dir: Path, task: Task, arch: Arch, label: str | None = None):
        self.label = label
        try:
            self.folder = RunFolder.open(runs_dir, run)
            self.turns = self.folder.turns()
            recorded = self.folder.config()
        except (OSError, ValueError) as e:  # RunFolderError and pydantic's are ValueErrors
            raise ConfigError(f"llm.run: {e}") from None
        if (recorded.task, recorded.arch) != (task.name, str(arch)):
            raise ConfigError(
                f"llm.run: {self.folder.path} solved {recorded.task} on {recorded.arch}, not {task.name} on {arch}"
            )
        self.replies = [s for s in self.folder.steps() if isinstance(s, ReplyStep)]
        if not self.turns and not self.replies:
            raise ConfigError(f"llm.run: {self.folder.path} has no finished turns to replay")
        self.max_answers = len(self.turns)
        self.max_steps = len(self.replies)

    def describe(self) -> str:
        count = f"{self.max_steps} replies" if self.replies else f"{self.max_answers} answers"
        return f"replay ({self.folder.path}, {count}{_of(self.label)})"

    def respond(self, messages: list[Message], turn: int, max_tokens: int | None = None) -> Reply:
        recorded = self.turns[turn - 1]
        # The completion is the recorded one, so is its count; the prompt is today's and gets counted anew.
        return Reply(
            text=recorded.response,
            reasoning=recorded.reasoning,
            finish_reason=recorded.finish_reason,
            completion_tokens=recorded.completion_tokens or None,
        )

    def act(self, messages: list[dict[str, Any]], step: int, tools: list[dict[str, Any]],
            max_tokens: int | None = None) -> Reply:  # fmt: skip
        recorded = self.replies[step - 1]
        return Reply(
            text=recorded.content,
            reasoning=recorded.reasoning,
            finish_reason=recorded.finish_reason,
            completion_tokens=recorded.completion_tokens or None,
            tool_calls=tuple(recorded.tool_calls),
        )

    def close(self) -> None:
        pass
