"""OUT/train.json, the record of one fine-tuning run (agent/sft/train.py writes it): what it trained on and how,
then how it ended. Typed here, apart from the trainer, so that it reads without the train extra."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from agent.loop.writes import write_inside

FORMAT_VERSION = 1
FILE = "train.json"


class DataFileRecord(BaseModel):
    """One exported file trained (or evaluated) on, with its data card."""

    path: str
    examples: int
    formats: list[str]
    card_path: str | None = None
    card: dict[str, Any] | None = Field(None, description="The data card as the exporter wrote it.")


class ExampleTokens(BaseModel):
    """One example as the model's tokenizer saw it."""

    id: str
    where: str = Field(description="file:line of the example.")
    tokens: int
    trained_tokens: int = Field(description="The tokens that carry the loss (the completion's).")


class Dropped(BaseModel):
    """Examples longer than max_length: dropped, never truncated."""

    count: int
    examples: list[ExampleTokens]


class Resolved(BaseModel):
    """What the settings resolved to on this machine."""

    precision: str
    chat_template: str
    device: str
    trainable_parameters: int
    parameters: int


class TokenCounts(BaseModel):
    """agent.sft.card.token_stats of the trained examples (None for none)."""

    per_example: dict[str, float] | None
    trained_per_example: dict[str, float] | None


class Coverage(BaseModel):
    """What a set of examples covers (agent.sft.data.counts)."""

    examples: int
    by_format: dict[str, int]
    by_task: dict[str, int]
    by_error_class: dict[str, int]


class EvaluatedOn(Coverage):
    dropped_too_long: Dropped


class TrainResult(BaseModel):
    steps: int
    train_loss: float
    seconds: float
    log_history: list[dict[str, Any]] = Field(description="The trainer's log, one entry per logged step.")
    eval_loss: float | None = Field(None, description="On eval_data, after training; None without it.")


class Outputs(BaseModel):
    """Folders under OUT, relative to it."""

    adapter: str
    merged: str | None


class TrainRecord(BaseModel):
    """Written before the first step (status training: a run that dies still says what it was) and again at the
    end (status done, with its result and outputs)."""

    format_version: int = FORMAT_VERSION
    status: Literal["training", "done"]
    command: str
    started_at: str
    settings: dict[str, Any] = Field(
        description="agent.sft.settings.TrainSettings as given, in JSON; kept as written, so that a record outlives "
        "a setting renamed later."
    )
    resolved: Resolved
    versions: dict[str, str]
    data: list[DataFileRecord]
    eval_data: list[DataFileRecord]
    max_length: int
    tokens: TokenCounts
    dropped_too_long: Dropped
    trained_on: Coverage
    examples: list[ExampleTokens]
    evaluated_on: EvaluatedOn
    finished_at: str | None = None
    result: TrainResult | None = None
    outputs: Outputs | None = None

    @field_validator("format_version")
    @classmethod
    def _known_version(cls, version: int) -> int:
        if version > FORMAT_VERSION:
            raise ValueError(f"format {version} is newer than this code reads ({FORMAT_VERSION}); update ptxbench")
        return version

    def write(self, out: Path) -> None:
        """OUT/train.json, replaced whole (a reader never sees half a record), never through a planted link."""
        write_inside(out / FILE, self.model_dump_json(indent=2) + "\n", atomic=True)

    @classmethod
    def load(cls, out: Path) -> TrainRecord:
        """OUT/train.json; a file that does not read is a ValueError naming it and the first field at fault."""
        path = out / FILE
        try:
            return cls.model_validate_json(path.read_text())
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(map(str, first["loc"])) or "the file"
            raise ValueError(f"{path}: {where}: {first['msg']}") from None
