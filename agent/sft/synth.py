"""Reasoning synthesis, as the paper made its fix-it data: a model writes the reasoning that leads from the
failed attempt, through its evaluation log, to the fixed answer (for kernelgen examples, from the task to the
answer), and it becomes the <think> part of the example's final message.

Only the reasoning changes: the answer after </think> is carried over byte for byte, and the new text is
refused when it holds a fenced source or launch-spec block (the harness takes an answer's code from its
fences) or a think tag. Rationales cut at the token limit, empty, or longer than max_reasoning_tokens are
dropped with their example; the data card counts each reason. The reasoning model is recorded in the card and
in each example's metadata; its API key is read from the environment by the policy and never written.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

from agent.loop.journal import Journal
from agent.loop.policies.base import Reply
from agent.loop.policies.openai_policy import OpenAIPolicy
from agent.loop.records import Message
from agent.loop.tokens import count_messages, count_text
from agent.loop.writes import write_inside
from agent.sft import data
from agent.sft.card import DESCRIPTIONS, describe, markdown, relative_paths
from agent.sft.data import DataError, DataFile, Record
from agent.sft.settings import SynthSettings
from tools.answer import FENCE, SOURCE_TAGS, SPEC_TAGS

PROMPTS = Path(__file__).resolve().parents[2] / "prompts" / "reasoning"
CODE_TAGS = frozenset(SOURCE_TAGS) | SPEC_TAGS


@dataclass(frozen=True)
class Result:
    """One synthesis run: how many examples got new reasoning, kept theirs, or were dropped (and why)."""

    read: int
    synthesized: int
    kept: int
    dropped: dict[str, int]
    out: Path
    card_md: Path


def request(record: Record) -> list[Message]:
    """What the reasoning model is asked: the example's prompt messages and the answer that passed."""
    messages = record.line["messages"]
    prompt, final = messages[:-1], messages[-1]["content"]
    template = "repair.md" if any(m["role"] == "assistant" for m in prompt) else "write.md"
    sections, seen_user, after_attempt = [], False, False
    for m in prompt:
        if m["role"] == "system":
            title = "System prompt"
        elif m["role"] == "assistant":
            title, after_attempt = "The failed attempt", True
        elif after_attempt:
            title = "The harness's evaluation log of that attempt"
        else:
            title = "Task" if not seen_user else "User"
            seen_user = True
        sections.append(f"## {title}\n\n{m['content']}")
    user = Template((PROMPTS / template).read_text()).substitute(
        conversation="\n\n".join(sections), answer=data.split_answer(final)[1]
    )
    return [Message(role="system", content=(PROMPTS / "system.md").read_text()), Message(role="user", content=user)]


def rationale(reply: Reply, max_tokens: int) -> tuple[str | None, str | None]:
    """(the reasoning to keep, None) or (None, why it is dropped)."""
    if reply.finish_reason == "length":
        return None, "truncated"
    text = reply.text.strip()
    inner, rest = data.split_answer(text)
    if inner is not None and not rest.strip():
        text = inner  # the model wrapped its text in <think> tags after all
    if "<think>" in text or "</think>" in text:
        return None, "malformed"
    if not text:
        return None, "empty"
    if any((m := FENCE.match(line)) and m.group(2).lower() in CODE_TAGS for line in text.splitlines()):
        return None, "code_block"
    if count_text(text) > max_tokens:
        return None, "too_long"
    return text, None


def with_reasoning(line: dict[str, Any], reasoning: str, model: str) -> dict[str, Any]:
    """The line with its final message's reasoning replaced and its metadata saying so."""
    messages = [dict(m) for m in line["messages"]]
    old_reasoning, answer = data.split_answer(messages[-1]["content"])
    messages[-1]["content"] = data.join_answer(reasoning, answer)
    if data.split_answer(messages[-1]["content"])[1] != answer:  # a think tag in `reasoning` would move the answer
        raise ValueError(f"the reasoning would change the answer it precedes: {reasoning[:80]!r}")
    meta = dict(line.get("metadata") or {})
    meta["reasoning"] = {
        "source": "synthesized",
        "model": model,
        "tokens": count_text(reasoning),
        "replaced": old_reasoning is not None,
    }
    meta["tokens"] = count_messages([Message(role=m["role"], content=m["content"]) for m in messages])
    return {**line, "messages": messages, "metadata": meta}


def as_recorded(line: dict[str, Any]) -> dict[str, Any]:
    """A line whose recorded reasoning is kept: its metadata says whose it is."""
    meta = dict(line.get("metadata") or {})
    meta["reasoning"] = {"source": "recorded", "model": (meta.get("answer") or {}).get("model")}
    return {**line, "metadata": meta}


def synthesize(settings: SynthSettings, command: str, journal: Journal) -> Result:
    """Reads the file, asks the model for each example that needs reasoning, writes OUT and its card.
    ConfigError/DataError for bad settings or data; ModelError when the endpoint fails after its retries.
    The policy says each retry through `journal` (numbered by the example's line)."""
    source = settings.data[0]
    if source.resolve() == settings.out.resolve():
        raise DataError(f"out={settings.out} is the input file: write the new data elsewhere")
    file = data.load(source, settings.require_card)
    policy = OpenAIPolicy(settings.llm, journal)
    todo = [
        (number, r)
        for number, r in enumerate(file.records, start=1)
        if settings.replace or not data.split_answer(r.line["messages"][-1]["content"])[0]
    ]
    pool = ThreadPoolExecutor(settings.concurrency)
    try:
        replies = list(pool.map(lambda job: policy.respond(request(job[1]), turn=job[0]), todo))
    finally:
        pool.shutdown(cancel_futures=True)  # an endpoint that failed one request is not asked the queued ones
        policy.close()
    by_number = {number: reply for (number, _), reply in zip(todo, replies, strict=True)}
    lines, dropped = [], Counter()
    for number, record in enumerate(file.records, start=1):
        if number not in by_number:
            lines.append(as_recorded(record.line))
            continue
        text, reason = rationale(by_number[number], settings.max_reasoning_tokens)
        if reason:
            dropped[reason] += 1
        else:
            lines.append(with_reasoning(record.line, text, settings.llm.model))
    data.write_jsonl(settings.out, lines)
    synthesized = len(todo) - sum(dropped.values())
    card = _card(file, lines, settings, command, synthesized, dict(dropped))
    card_md = settings.out.with_suffix(".card.md")
    write_inside(settings.out.with_suffix(".card.json"), json.dumps(card, indent=2) + "\n")
    write_inside(card_md, markdown(card) + _reasoning_section(card["reasoning"]))
    return Result(len(file.records), synthesized, len(file.records) - len(todo), dict(dropped), settings.out, card_md)


def _card(
    file: DataFile, lines: list[dict[str, Any]], s: SynthSettings, command: str, synthesized: int, dropped: dict
) -> dict[str, Any]:
    """The input's card, carried over, with this step in its funnel, the new file's counts and a reasoning
    section; what the input's card lacks (or all of it, without one) gets the parts a card always has."""
    kind = min(file.formats)
    base = {
        "format": kind,
        "description": DESCRIPTIONS.get(kind, "examples without a data card"),
        "runs_read": 0,
        "runs_skipped": [],
        "filters": {},
        "held_out_tasks": [],
        "funnel": [],
        **(file.card or {}),
    }
    kept = [data.parse(obj, f"{s.out}:{n}", kind).example for n, obj in enumerate(lines, start=1)]
    removed = sum(dropped.values())
    return {
        **base,
        "command": relative_paths(command, s.out.parent),
        "derived_from": {
            "path": os.path.relpath(file.path.resolve(), s.out.parent.resolve()),
            "command": base.get("command"),
        },
        "funnel": [
            *base["funnel"],
            {"name": "synth_reasoning", "removed": removed, "kept": len(kept), "file": "train"},
        ],
        "files": {"train": describe(kept, s.out, kind)},
        "reasoning": {
            "model": s.llm.model,
            "replace": s.replace,
            "max_reasoning_tokens": s.max_reasoning_tokens,
            "synthesized": synthesized,
            "kept_as_recorded": len(file.records) - synthesized - removed,
            "dropped": dropped,
        },
    }


def _reasoning_section(r: dict[str, Any]) -> str:
    dropped = ", ".join(f"{k} {v}" for k, v in sorted(r["dropped"].items())) or "none"
    which = "every example's, recorded ones replaced" if r["replace"] else "the examples that had none"
    return (
        f"\n## Reasoning\n\nSynthesized by `{r['model']}` for {which}: {r['synthesized']} written, "
        f"{r['kept_as_recorded']} kept as recorded, dropped with their example: {dropped} "
        f"(too_long: over {r['max_reasoning_tokens']:,} tokens).\n"
    )
