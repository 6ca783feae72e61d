"""The extract step: a model's reply → a Solution, or the failed evaluation that goes back to the model.

A reply cut off at the output limit is refused before extraction (a truncated module is never worth
assembling); anything else goes through tools.answer, whose messages are written for the model.
"""

from __future__ import annotations

from tools.answer import AnswerError, extract_solution
from tools.schema import Arch, Evaluation, Solution, Stage, StageResult, StageState, Status, Task

TRUNCATED = (
    "the answer was cut off at the output token limit (finish_reason=length) before it ended, so it was "
    "not evaluated. Write a shorter answer: a few lines of prose, then the two blocks, with no "
    "commented-out or repeated code."
)


def check_answer(
    text: str, finish_reason: str | None, task: Task, arch: Arch
) -> tuple[Solution | None, Evaluation | None]:
    """(solution, None) when the reply holds one, else (None, an extract_error evaluation)."""
    if finish_reason == "length":
        return None, extract_failure(task, arch, TRUNCATED)
    try:
        return extract_solution(text), None
    except AnswerError as e:
        return None, extract_failure(task, arch, str(e))


def extract_failure(task: Task, arch: Arch, message: str) -> Evaluation:
    """Shaped as tools.pipeline reports a failed extract stage."""
    return Evaluation(
        task=task.name,
        arch=arch,
        status=Status.EXTRACT_ERROR,
        message=f"{Stage.EXTRACT} failed: {message}",
        stages=[StageResult(name=Stage.EXTRACT, state=StageState.FAILED, message=message)],
    )
