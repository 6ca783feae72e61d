"""LoRA fine-tuning on exported SFT data with TRL's SFTTrainer, recorded in OUT/train.json.

Each exported line becomes a conversational prompt-completion example: `prompt` = every message but the
last, `completion` = the last. TRL then puts the loss on the completion's tokens only, so a fix-it pair
trains the repair and never the failed attempt in its prompt (`assistant_only_loss` on `messages` would
train on both). Examples longer than max_length are dropped, with a count: a truncated kernel would teach
the model to stop mid-module.

OUT/
  train.json   data cards, exact settings, versions, token counts, what was dropped and trained on, result
  adapter/     the LoRA adapter (PEFT) with the tokenizer and the chat template it was trained with
  merged/      merge=true: the base model with the adapter merged in, ready for vLLM or SGLang
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase
from trl import SFTConfig, SFTTrainer
from trl.chat_template_utils import qwen3_chat_template
from trl.data_utils import common_prefix_length

from agent.cli import ConfigError
from agent.sft import data
from agent.sft.card import token_stats
from agent.sft.data import DataError, DataFile, Record
from agent.sft.settings import TrainSettings
from agent.sft.train_record import (
    Coverage,
    DataFileRecord,
    Dropped,
    EvaluatedOn,
    ExampleTokens,
    Outputs,
    Resolved,
    TokenCounts,
    TrainRecord,
    TrainResult,
)
from tools.files import not_a_file

QWEN3 = "Qwen3 (TRL's copy; the model has none)"
QWEN3_TOKENS = ("<|im_start|>", "<|im_end|>")
PACKAGES = ("ptxbench", "torch", "transformers", "trl", "peft", "datasets", "accelerate", "tokenizers")


@dataclass(frozen=True)
class Measured:
    """An example as the model's tokenizer sees it: all its tokens, and those that carry the loss."""

    record: Record
    conversation: dict[str, list[dict[str, str]]]  # {"prompt": [...], "completion": [...]}
    tokens: int
    trained_tokens: int


@dataclass
class Prepared:
    """Everything decided before the first step: what trains, on what, how; `trainer` is ready to run."""

    settings: TrainSettings
    command: str
    files: list[DataFile]
    eval_files: list[DataFile]
    chat_template: str
    precision: str
    train: list[Measured]
    dropped: list[Measured]
    evaluate: list[Measured]
    eval_dropped: list[Measured]
    tokenizer: PreTrainedTokenizerBase
    trainer: SFTTrainer


def conversation(record: Record) -> dict[str, list[dict[str, str]]]:
    """The prompt-completion form of one exported line (only role and content: the template needs no more)."""
    messages = [{"role": m["role"], "content": m["content"]} for m in record.line["messages"]]
    return {"prompt": messages[:-1], "completion": messages[-1:]}


def choose_chat_template(tokenizer: PreTrainedTokenizerBase, model: str, path: Path | None) -> str:
    """Sets the template to train with and says which it is: the file given, the model's own, or Qwen3's
    (whose special tokens the tokenizer must know)."""
    if path is not None:
        problem = not_a_file(path)
        if problem:
            raise ConfigError(f"chat_template={path}: {problem.removeprefix('is ')}")
        tokenizer.chat_template = path.read_text()
        return str(path)
    if tokenizer.chat_template:
        return "the model's own"
    missing = [t for t in QWEN3_TOKENS if t not in tokenizer.get_vocab()]
    if missing:
        raise ConfigError(
            f"model={model} has no chat template, and its tokenizer lacks {', '.join(missing)}, which the Qwen3 "
            "template needs: give chat_template=FILE.jinja"
        )
    tokenizer.chat_template = qwen3_chat_template
    return QWEN3


def measure(tokenizer: PreTrainedTokenizerBase, record: Record) -> Measured:
    """Token counts made with the same calls TRL makes when it tokenizes the example."""
    conv = conversation(record)
    full = _ids(tokenizer, conv["prompt"] + conv["completion"])
    prompt = _ids(tokenizer, conv["prompt"], add_generation_prompt=True)
    return Measured(record, conv, len(full), len(full) - common_prefix_length(prompt, full))


def check_reasoning_kept(tokenizer: PreTrainedTokenizerBase, examples: list[Measured], template: str) -> None:
    """Some chat templates drop the <think> part of assistant turns, and the reasoning is what we train. A
    template renders every example alike, so the first one with reasoning tells."""
    for m in examples:
        reasoning, _ = data.split_answer(m.conversation["completion"][0]["content"])
        if not reasoning:
            continue
        text = tokenizer.apply_chat_template(m.conversation["prompt"] + m.conversation["completion"], tokenize=False)
        if reasoning not in text:
            raise ConfigError(
                f"the chat template ({template}) drops the <think> reasoning of the trained answer "
                f"({m.record.where}); give chat_template=FILE.jinja with one that keeps it"
            )
        return


def resolve_precision(setting: str) -> str:
    if setting != "auto":
        return setting
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"


def prepare(settings: TrainSettings, command: str) -> Prepared:
    """Reads and checks the data, measures it with the model's tokenizer, and builds the trainer; raises
    DataError or ConfigError (usage: exit 2) before any model weight is loaded when the data is wrong."""
    files = [data.load(p, settings.require_card) for p in settings.data]
    eval_files = [data.load(settings.eval_data, settings.require_card)] if settings.eval_data else []
    data.check_formats(files + eval_files, settings.allow_mixed)
    if (settings.out / "adapter").exists():
        raise ConfigError(f"out={settings.out} already holds a trained adapter: choose another folder")
    if torch.cuda.device_count() > 1:
        # transformers' Trainer would wrap the model in DataParallel, which LoRA with checkpointing does not survive.
        raise ConfigError("several GPUs are visible: pick one, e.g. CUDA_VISIBLE_DEVICES=0")
    precision = resolve_precision(settings.precision)
    tokenizer = _load(AutoTokenizer.from_pretrained, settings.model)
    template = choose_chat_template(tokenizer, settings.model, settings.chat_template)
    train, dropped = _fit(tokenizer, files, settings.max_length)
    evaluate, eval_dropped = _fit(tokenizer, eval_files, settings.max_length)
    if not dropped and not train:
        raise DataError(f"no examples in {', '.join(str(p) for p in settings.data)}")
    if not train:
        shortest = dropped[0].tokens
        raise DataError(f"no example fits max_length={settings.max_length} (the shortest has {shortest:,} tokens)")
    check_reasoning_kept(tokenizer, train, template)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = _load(AutoModelForCausalLM.from_pretrained, settings.model, dtype=dtype)
    trainer = SFTTrainer(
        model=model,
        args=_trainer_args(settings, precision, template),
        train_dataset=Dataset.from_list([m.conversation for m in train]),
        eval_dataset=Dataset.from_list([m.conversation for m in evaluate]) if evaluate else None,
        processing_class=tokenizer,
        peft_config=_lora(settings),
    )
    _check_prepared(trainer.train_dataset, train)
    return Prepared(
        settings=settings,
        command=command,
        files=files,
        eval_files=eval_files,
        chat_template=template,
        precision=precision,
        train=train,
        dropped=dropped,
        evaluate=evaluate,
        eval_dropped=eval_dropped,
        tokenizer=tokenizer,
        trainer=trainer,
    )


def run(prepared: Prepared) -> TrainRecord:
    """Trains, saves the adapter (and merged weights), and returns the record it wrote to OUT/train.json."""
    s, trainer = prepared.settings, prepared.trainer
    s.out.mkdir(parents=True, exist_ok=True)
    record = describe(prepared)
    record.write(s.out)  # a run that dies still says what it was
    start = time.monotonic()
    result = trainer.train()
    trainer.save_model(str(s.out / "adapter"))
    seconds = round(time.monotonic() - start, 1)
    eval_loss = trainer.evaluate()["eval_loss"] if prepared.evaluate else None
    if s.merge:
        merged = trainer.model.merge_and_unload()
        merged.config.use_cache = True  # training turned the KV cache off; serving wants it
        merged.save_pretrained(s.out / "merged")
        prepared.tokenizer.save_pretrained(s.out / "merged")
    record = record.model_copy(update={
        "status": "done",
        "finished_at": _now(),
        "result": TrainResult(steps=trainer.state.global_step, train_loss=result.training_loss, seconds=seconds,
                              log_history=trainer.state.log_history, eval_loss=eval_loss),
        "outputs": Outputs(adapter="adapter", merged="merged" if s.merge else None),
    })  # fmt: skip
    record.write(s.out)
    return record


def describe(prepared: Prepared) -> TrainRecord:
    """The train.json record of a prepared run, before any step: what it trains on and how."""
    s, model = prepared.settings, prepared.trainer.model
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return TrainRecord(
        status="training",
        command=prepared.command,
        started_at=_now(),
        settings=s.model_dump(mode="json"),
        resolved=Resolved(
            precision=prepared.precision,
            chat_template=prepared.chat_template,
            device=_device(),
            trainable_parameters=trainable,
            parameters=sum(p.numel() for p in model.parameters()),
        ),
        versions=versions(),
        data=[_file(f) for f in prepared.files],
        eval_data=[_file(f) for f in prepared.eval_files],
        max_length=s.max_length,
        tokens=TokenCounts(
            per_example=token_stats([m.tokens for m in prepared.train]),
            trained_per_example=token_stats([m.trained_tokens for m in prepared.train]),
        ),
        dropped_too_long=_dropped(prepared.dropped),
        trained_on=Coverage(examples=len(prepared.train), **data.counts([m.record.example for m in prepared.train])),
        examples=_examples(prepared.train),
        evaluated_on=EvaluatedOn(
            examples=len(prepared.evaluate),
            dropped_too_long=_dropped(prepared.eval_dropped),
            **data.counts([m.record.example for m in prepared.evaluate]),
        ),
    )


def summary(p: Prepared) -> str:
    """What the run will train on, for people: files, template, token counts, drops, coverage."""
    lines = [f"data: {_file_line(f)}" for f in p.files] + [f"eval data: {_file_line(f)}" for f in p.eval_files]
    lines.append(f"chat template: {p.chat_template}; precision: {p.precision}")
    for label, values in (
        ("tokens per example", [m.tokens for m in p.train]),
        ("of which carry the loss", [m.trained_tokens for m in p.train]),
    ):
        stats = token_stats(values)
        lines.append(f"{label}: " + ", ".join(f"{k} {stats[k]:,.0f}" for k in ("min", "median", "p90", "max")))
    for name, dropped in (("training", p.dropped), ("evaluation", p.eval_dropped)):
        if dropped:
            shown = ", ".join(f"{m.record.example.id} ({m.tokens:,})" for m in dropped[:5])
            more = f" and {len(dropped) - 5} more" if len(dropped) > 5 else ""
            lines.append(
                f"dropped from {name}: {len(dropped)} longer than max_length={p.settings.max_length}: {shown}{more}"
            )
    lines.append(f"training on {len(p.train)} examples" + (f", evaluating on {len(p.evaluate)}" if p.evaluate else ""))
    for key, values in data.counts([m.record.example for m in p.train]).items():
        if values:
            lines.append(f"  {key.replace('_', ' ')}: " + ", ".join(f"{k} {v}" for k, v in values.items()))
    return "\n".join(lines)


def finished(record: TrainRecord, out: Path) -> str:
    """The end of a run, for people: steps, losses, where everything went and how to serve it."""
    r = record.result
    eval_loss = f", eval loss {r.eval_loss:.4f}" if r.eval_loss is not None else ""
    lines = [f"trained {r.steps} steps in {r.seconds:g} s: train loss {r.train_loss:.4f}{eval_loss}",
             f"adapter: {out / 'adapter'}"]  # fmt: skip
    if record.outputs.merged:
        lines += [f"merged: {out / 'merged'}", f"serve: vllm serve {out / 'merged'} --reasoning-parser qwen3"]
    lines.append(f"record: {out / 'train.json'}")
    return "\n".join(lines)


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"  # the project run from a checkout without `pip install -e`
    return found


def _ids(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], **kwargs: Any) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)["input_ids"])


def _fit(tokenizer: PreTrainedTokenizerBase, files: list[DataFile], max_length: int) -> tuple[list, list]:
    measured = [measure(tokenizer, r) for f in files for r in f.records]
    kept = [m for m in measured if m.tokens <= max_length]
    return kept, sorted((m for m in measured if m.tokens > max_length), key=lambda m: m.tokens)


def _trainer_args(s: TrainSettings, precision: str, template: str) -> SFTConfig:
    try:
        return _sft_config(s, precision, template)
    except ValueError as e:  # transformers' own checks of the combination (e.g. bf16 on a GPU without it)
        raise ConfigError(f"the trainer refused these settings: {str(e).strip().splitlines()[0]}") from None


def _sft_config(s: TrainSettings, precision: str, template: str) -> SFTConfig:
    cuda = torch.cuda.is_available()
    return SFTConfig(
        output_dir=str(s.out),  # nothing is written there but what run() saves: save_strategy="no"
        learning_rate=s.lr,
        num_train_epochs=s.epochs,
        max_steps=s.max_steps or -1,
        per_device_train_batch_size=s.batch_size,
        per_device_eval_batch_size=s.batch_size,
        gradient_accumulation_steps=s.grad_accum,
        warmup_steps=s.warmup_ratio,  # a float below 1 is a share of the steps
        bf16=precision == "bf16",
        fp16=False,
        gradient_checkpointing=s.gradient_checkpointing,
        max_length=s.max_length,  # every kept example fits: nothing is truncated
        completion_only_loss=True,
        # Qwen3's template ends each turn with <|im_end|>: generation must stop there, not at the tokenizer's eos.
        eos_token=QWEN3_TOKENS[1] if template == QWEN3 else None,
        use_cpu=not cuda,  # explicit, so that precision=bf16 also runs (slowly) on a CPU
        dataloader_pin_memory=cuda,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=s.seed,
        data_seed=s.seed,
    )


def _lora(s: TrainSettings) -> LoraConfig:
    modules = s.lora.target_modules
    return LoraConfig(
        r=s.lora.r,
        lora_alpha=s.lora.alpha,
        lora_dropout=s.lora.dropout,
        target_modules=modules if modules == "all-linear" else [m.strip() for m in modules.split(",") if m.strip()],
        task_type="CAUSAL_LM",
    )


def _check_prepared(dataset: Dataset, measured: list[Measured]) -> None:
    """TRL tokenized the examples as measured: none was truncated, and the loss covers the completion."""
    got = [
        (len(ids), sum(label != -100 for label in labels))
        for ids, labels in zip(dataset["input_ids"], dataset["labels"], strict=True)
    ]
    want = [(m.tokens, m.trained_tokens) for m in measured]
    if got != want:
        raise RuntimeError(f"TRL prepared the examples differently than measured: {got} != {want}")


def _load(loader: Any, model: str, **kwargs: Any) -> Any:
    try:
        return loader(model, **kwargs)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"model={model}: cannot load it ({first})") from None


def _file(f: DataFile) -> DataFileRecord:
    return DataFileRecord(path=str(f.path), examples=len(f.records), formats=sorted(f.formats),
                          card_path=str(f.card_path) if f.card_path else None, card=f.card)  # fmt: skip


def _file_line(f: DataFile) -> str:
    card = f.card_path.name if f.card_path else "no card"
    return f"{f.path} ({', '.join(sorted(f.formats))}, {len(f.records)} examples, {card})"


def _dropped(measured: list[Measured]) -> Dropped:
    return Dropped(count=len(measured), examples=_examples(measured))


def _examples(measured: list[Measured]) -> list[ExampleTokens]:
    return [ExampleTokens(id=m.record.example.id, where=m.record.where, tokens=m.tokens,
                          trained_tokens=m.trained_tokens) for m in measured]  # fmt: skip


def _device() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.cuda.current_device())
    return f"cpu ({os.cpu_count()} cores)"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
