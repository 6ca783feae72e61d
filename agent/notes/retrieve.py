"""The notes whose signatures best match a failure: Okapi BM25 over signature text, among the notes of the same
task family and arch (and, held out, none mined from the task's own runs); and the feedback section that shows
them, cut to a budget."""

from __future__ import annotations

import math
import re
from collections import Counter

from agent.loop.config import FeedbackConfig
from agent.notes.record import RepairNote, read_notes, signature
from tasks.schema import Task
from tools.evaluation import Evaluation, Status

K1, B = 1.5, 0.75  # Okapi BM25's usual constants
SECTION = "Notes from earlier repairs"
SECTION_CHARS = 3000  # the section's budget: a few notes, never a second knowledge pack
WORD = re.compile(r"[a-z0-9_]+(?:\.[a-z0-9_]+)*")


def words(text: str) -> list[str]:
    """Lower-case words, dotted PTX names kept whole (cp.async.bulk) and also split into their parts."""
    found = WORD.findall(text.lower())
    return found + [part for w in found if "." in w for part in w.split(".")]


class NoteIndex:
    """BM25 over the notes' signatures; build it once per run."""

    @classmethod
    def of(cls, settings: FeedbackConfig) -> NoteIndex | None:
        return cls(read_notes(settings.notes)) if settings.notes is not None else None

    def __init__(self, notes: list[RepairNote]):
        self.notes = notes
        self.docs = [Counter(words(n.signature.text())) for n in notes]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.average = sum(self.lengths) / len(self.lengths) if notes else 0.0
        having = Counter(word for d in self.docs for word in d)
        n = len(notes)
        self.idf = {w: math.log(1 + (n - k + 0.5) / (k + 0.5)) for w, k in having.items()}

    def score(self, i: int, query: list[str]) -> float:
        doc, norm = self.docs[i], K1 * (1 - B + B * self.lengths[i] / (self.average or 1))
        return sum(self.idf[w] * doc[w] * (K1 + 1) / (doc[w] + norm) for w in set(query) if w in doc)

    def retrieve(self, evaluation: Evaluation, family: str, arch: str, k: int,
                 exclude_task: str | None = None) -> list[RepairNote]:  # fmt: skip
        """At most `k` notes of `family` on `arch` that share words with this failure's signature, best first
        (ties: the order mined); `exclude_task`: none mined from that task's runs."""
        query = words(signature(evaluation).text())
        scored = []
        for i, note in enumerate(self.notes):
            if note.family != family or note.arch != arch or (exclude_task and exclude_task in note.tasks()):
                continue
            score = self.score(i, query)
            if score > 0:
                scored.append((-score, i))
        return [self.notes[i] for _, i in sorted(scored)[:k]]


def notes_section(notes: list[RepairNote], limit: int = SECTION_CHARS) -> tuple[str, list[RepairNote]]:
    """The feedback's section and the notes it holds: whole notes, best first, while they fit in `limit`."""
    head = (f"## {SECTION}\n\nWhat fixed failures like this one in earlier runs (signature, what the next attempt "
            "changed, and what came of it); a hint, not a rule:\n")  # fmt: skip
    shown, text = [], head
    for note in notes:
        entry = "\n" + note.render()
        if len(text) + len(entry) > limit:
            break
        text += entry
        shown.append(note)
    return (text if shown else ""), shown


def notes_feedback(
    index: NoteIndex, evaluation: Evaluation, task: Task, arch: str, settings: FeedbackConfig, target_speedup: float
) -> tuple[str, list[str]]:
    """The notes section for an attempt that failed or fell short of the target, and the ids of the notes it
    shows; ("", []) for a solved or an unverified attempt (nothing failed that a note could match)."""
    if evaluation.solved(target_speedup) or evaluation.status is Status.UNVERIFIED:
        return "", []
    exclude = task.name if settings.notes_exclude_task else None
    found = index.retrieve(evaluation, task.family, arch, settings.notes_k, exclude_task=exclude)
    section, shown = notes_section(found)
    return section, [n.id for n in shown]
