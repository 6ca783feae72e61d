"""What `agent.train_sft` and `agent.synth_reasoning` can be told, each setting documented where it is
declared (their `help` is printed from these models). Kept apart from the code that uses them so that help
and usage errors need neither the train extra nor a model."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent.loop.config import OpenAIConfig


def _jsonl(path: Path) -> Path:
    if path.suffix != ".jsonl":
        raise ValueError(f"must name a .jsonl file, got {path}")
    return path


class LoraSettings(BaseModel):
    """The LoRA adapter (PEFT): its rank, scale, dropout and the layers it adapts."""

    model_config = ConfigDict(extra="forbid")
    r: int = Field(32, ge=1, description="Rank of the adapter's matrices.")
    alpha: int = Field(64, ge=1, description="Scale numerator: updates are scaled by alpha / r.")
    dropout: float = Field(0.05, ge=0, lt=1, description="Dropout on the adapter's input.")
    target_modules: str = Field(
        "all-linear", description="Layers to adapt: all-linear, or comma-separated module names (q_proj,v_proj)."
    )


class TrainSettings(BaseModel):
    """One LoRA fine-tuning run on exported SFT data."""

    model_config = ConfigDict(extra="forbid")
    data: list[Path] = Field(min_length=1, description="Exported SFT files (agent.sft.export), trained on together.")
    model: str = Field(description="The base model: a local folder, or a Hugging Face model name.")
    out: Path = Field(description="Output folder: train.json, adapter/, merged/ (merge=true).")
    lora: LoraSettings = Field(default_factory=LoraSettings)
    lr: float = Field(1e-4, gt=0, description="Peak learning rate (linear decay after warm-up).")
    epochs: float = Field(1.0, gt=0, description="Passes over the data (ignored when max_steps is set).")
    max_steps: int | None = Field(None, ge=1, description="Optimizer steps in all; unset: run the epochs.")
    max_length: int = Field(
        32768, ge=16, description="Longest example in the model's tokens; longer ones are dropped, never truncated."
    )
    batch_size: int = Field(1, ge=1, description="Examples per forward pass.")
    grad_accum: int = Field(8, ge=1, description="Forward passes per optimizer step.")
    warmup_ratio: float = Field(0.03, ge=0, lt=1, description="Share of the steps spent warming the rate up.")
    precision: Literal["auto", "bf16", "fp32"] = Field(
        "auto", description="Weights and arithmetic: auto is bf16 on a GPU that has it, else fp32."
    )
    gradient_checkpointing: bool = Field(True, description="Recompute activations in the backward pass (less memory).")
    chat_template: Path | None = Field(
        None, description="A Jinja chat template to use; unset: the model's own, else the Qwen3 template."
    )
    eval_data: Path | None = Field(None, description="A held-out exported file: its loss is measured after training.")
    seed: int = Field(0, description="Seeds the adapter's initialisation and the data order.")
    merge: bool = Field(False, description="Also write the base model with the adapter merged in (out/merged).")
    allow_mixed: bool = Field(False, description="Train on files of different formats (fixit and kernelgen) together.")
    require_card: bool = Field(True, description="Refuse a file without its data card (FILE.card.json).")

    @field_validator("data")
    @classmethod
    def _jsonl_files(cls, paths: list[Path]) -> list[Path]:
        return [_jsonl(p) for p in paths]


class SynthSettings(BaseModel):
    """Reasoning synthesis: a model writes the <think> part of each example's final answer."""

    model_config = ConfigDict(extra="forbid")
    data: list[Path] = Field(
        min_length=1, max_length=1, description="The exported SFT file (agent.sft.export) to add reasoning to."
    )
    llm: OpenAIConfig = Field(default_factory=OpenAIConfig, description="The reasoning model's endpoint.")
    out: Path = Field(description="Where the new file goes (FILE.jsonl, its data card beside it).")
    max_reasoning_tokens: int = Field(
        8192, ge=1, description="Longer rationales are dropped with their example (tiktoken's count)."
    )
    replace: bool = Field(False, description="Replace reasoning already recorded; false: fill in only missing ones.")
    concurrency: int = Field(4, ge=1, description="Requests in flight at once.")
    require_card: bool = Field(True, description="Refuse a file without its data card (FILE.card.json).")

    @field_validator("data")
    @classmethod
    def _jsonl_files(cls, paths: list[Path]) -> list[Path]:
        return [_jsonl(p) for p in paths]

    @field_validator("out")
    @classmethod
    def _jsonl_out(cls, path: Path) -> Path:
        return _jsonl(path)
