"""`python -m agent.train_sft` on the exported fixtures (tests/fixtures/sft), with a random-init tiny Qwen3-style
model and a BPE tokenizer trained in the test (agent/sft/tiny.py): the real TRL SFTTrainer and PEFT, on the CPU, with no
download."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from tokenizers import Tokenizer, models
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from agent import cli
from agent.cli import ConfigError
from agent.sft import data, train
from agent.sft.settings import LoraSettings, TrainSettings
from agent.sft.train_record import FORMAT_VERSION, TrainRecord
from agent.train_sft import main
from tests.agent.sft.conftest import FIXIT, HOLDOUT, KERNELGEN

REPO = Path(__file__).resolve().parents[3]
STEPS = 2


def settings(model_dir: Path, out: Path, *words: str) -> TrainSettings:
    return cli.read(TrainSettings, [str(FIXIT), str(KERNELGEN), f"model={model_dir}", f"out={out}", *words], "data")


@pytest.fixture(scope="module")
def trained(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One run of the command: 2 optimizer steps on both exported files, the held-out file evaluated, merged."""
    out = tmp_path_factory.mktemp("sft") / "out"
    argv = [str(FIXIT), str(KERNELGEN), f"model={model_dir}", f"out={out}", f"max_steps={STEPS}", "batch_size=2",
            "grad_accum=1", "lora.r=8", "lora.alpha=16", "--allow-mixed", "true", "merge=true",
            f"eval_data={HOLDOUT}"]  # fmt: skip
    assert main(argv) == 0
    return out, json.loads((out / "train.json").read_text())


def expected_completion(line: dict) -> str:
    """The final message as the Qwen3 template writes it: reasoning (empty when none) in think tags, the answer,
    the end-of-turn token."""
    reasoning, answer = data.split_answer(line["messages"][-1]["content"])
    return f"<think>\n{reasoning or ''}\n</think>\n\n{answer}<|im_end|>\n"


def test_label_mask_is_exactly_the_final_answer(model_dir: Path, tmp_path: Path) -> None:
    prepared = train.prepare(settings(model_dir, tmp_path / "out", "allow_mixed=true"), "test")
    trainer, tok = prepared.trainer, prepared.tokenizer
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(prepared.train))])
    assert len(prepared.train) == 8 and batch["labels"].shape == batch["input_ids"].shape
    for row, measured in enumerate(prepared.train):
        line = measured.record.line
        length = int(batch["attention_mask"][row].sum())
        ids, labels = batch["input_ids"][row, :length], batch["labels"][row, :length]
        trained = (labels != -100).nonzero().flatten()
        start = int(trained[0])
        assert trained.tolist() == list(range(start, length))  # one span, running to the end of the example
        assert torch.equal(labels[start:], ids[start:]) and (batch["labels"][row, length:] == -100).all()
        assert tok.decode(ids[start:]) == expected_completion(line)
        prompt = tok.decode(ids[:start])
        assert prompt.endswith("<|im_start|>assistant\n")
        for m in line["messages"][:-1]:  # every prompt message, the failed attempt of a fix-it pair included
            assert m["content"] in prompt
    wrong = [m.record for m in prepared.train if m.record.example.kind == "fixit"]
    assert len(wrong) == 3 and all(r.line["messages"][2]["weight"] == 0 for r in wrong)


def test_cli_trains_two_steps_and_records_everything(trained: tuple[Path, dict]) -> None:
    out, record = trained
    assert record["status"] == "done" and record["format_version"] == FORMAT_VERSION
    assert TrainRecord.load(out).model_dump(mode="json") == record
    result = record["result"]
    assert result["steps"] == STEPS and math.isfinite(result["train_loss"]) and math.isfinite(result["eval_loss"])
    assert [h["step"] for h in result["log_history"] if "loss" in h] == [1, 2]
    assert record["settings"]["lora"] == {"r": 8, "alpha": 16, "dropout": 0.05, "target_modules": "all-linear"}
    assert record["settings"]["max_steps"] == STEPS and record["settings"]["allow_mixed"] is True
    assert record["resolved"]["precision"] == "fp32" and record["resolved"]["chat_template"] == train.QWEN3
    assert {"python", "torch", "transformers", "trl", "peft", "datasets"} <= set(record["versions"])
    cards = {Path(d["path"]).name: d["card"] for d in record["data"]}
    assert cards == {
        "fixit.jsonl": json.loads(FIXIT.with_name("fixit.card.json").read_text()),
        "kernelgen.jsonl": json.loads(KERNELGEN.with_name("kernelgen.card.json").read_text()),
    }
    assert record["trained_on"] == {
        "examples": 8,
        "by_format": {"fixit": 3, "kernelgen": 5},
        "by_task": {"gemm_n7168_k5120": 7, "mha_with_lse_d128": 1},
        "by_error_class": {"compile_error": 1, "mismatch": 1, "timeout": 1},
    }
    assert record["evaluated_on"]["examples"] == 1 and record["evaluated_on"]["by_task"] == {"mha_with_lse_d128": 1}
    assert record["dropped_too_long"] == {"count": 0, "examples": []}
    sizes = [e["tokens"] for e in record["examples"]]
    assert len(sizes) == 8 and all(0 < e["trained_tokens"] < e["tokens"] for e in record["examples"])
    assert record["tokens"]["per_example"]["max"] == max(sizes)


def test_lora_adapter_reloads_and_merged_weights_match_it(trained: tuple[Path, dict], model_dir: Path) -> None:
    out, _ = trained
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["r"] == 8
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(out / "adapter")
    assert "<|im_start|>" in tok.chat_template  # the template it trained with travels with the adapter
    inputs = tok("ld.param.u64 %rd1, [c];", return_tensors="pt")
    with torch.no_grad():
        before = base(**inputs).logits
        adapted = PeftModel.from_pretrained(base, out / "adapter").eval()
        lora_b = [p for n, p in adapted.named_parameters() if "lora_B" in n]
        assert lora_b and all(p.abs().sum() > 0 for p in lora_b)  # initialised to zero, then trained
        after = adapted(**inputs).logits
        merged = AutoModelForCausalLM.from_pretrained(out / "merged")(**inputs).logits
    assert not torch.allclose(before, after)
    torch.testing.assert_close(merged, after, rtol=1e-4, atol=1e-5)


def test_examples_over_max_length_are_dropped_not_truncated(model_dir: Path, tmp_path: Path) -> None:
    tok = AutoTokenizer.from_pretrained(model_dir)
    train.choose_chat_template(tok, str(model_dir), None)
    sizes = {r.example.id: train.measure(tok, r).tokens for r in data.load(FIXIT).records}
    limit = sorted(sizes.values())[1]  # keeps two of the three pairs
    prepared = train.prepare(settings(model_dir, tmp_path / "out", f"max_length={limit}", "allow_mixed=true"), "t")
    assert [m.record.example.id for m in prepared.dropped] == [k for k, v in sizes.items() if v > limit]
    assert all(m.tokens <= limit for m in prepared.train) and len(prepared.train) == 7
    assert [len(ids) for ids in prepared.trainer.train_dataset["input_ids"]] == [m.tokens for m in prepared.train]
    assert f"dropped from training: 1 longer than max_length={limit}" in train.summary(prepared)
    assert train.describe(prepared).dropped_too_long.count == 1


def test_the_models_own_chat_template_is_used(model_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.chat_template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    assert train.choose_chat_template(tok, "m", None) == "the model's own"
    assert tok.chat_template.startswith("{% for m in messages %}")


def test_a_template_that_drops_the_reasoning_is_refused(model_dir: Path, tmp_path: Path) -> None:
    template = tmp_path / "no_think.jinja"
    template.write_text(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content.split('</think>')[-1] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(ConfigError, match="drops the <think> reasoning"):
        train.prepare(settings(model_dir, tmp_path / "out", f"chat_template={template}", "allow_mixed=true"), "t")


def test_a_tokenizer_without_qwen3_tokens_needs_a_template() -> None:
    words = Tokenizer(models.WordLevel({"<unk>": 0, "kernel": 1}, unk_token="<unk>"))
    with pytest.raises(ConfigError, match=r"lacks <\|im_start\|>, <\|im_end\|>, which the Qwen3 template needs"):
        train.choose_chat_template(PreTrainedTokenizerFast(tokenizer_object=words), "m", None)


def exported_copy(tmp_path: Path, source: Path = FIXIT) -> Path:
    for name in (source.name, source.with_suffix("").name + ".card.json"):
        shutil.copy(source.with_name(name), tmp_path / name)
    return tmp_path / source.name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("no_card", "fixit.jsonl: no data card beside it (fixit.card.json)"),
        ("bad_line", "fixit.jsonl:2: not JSON"),
        ("no_messages", "fixit.jsonl:3: not an exported example"),
        ("line_removed", "holds 2 examples but its card fixit.card.json says 3 examples"),
        ("mixed", "mixed formats: fixit (fixit.jsonl), kernelgen (kernelgen.jsonl); give allow_mixed=true"),
    ],
)
def test_bad_data_is_one_line_and_exit_2(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture, change: str, message: str
) -> None:
    path = exported_copy(tmp_path)
    lines = path.read_text().splitlines()
    paths = [path]
    if change == "no_card":
        path.with_name("fixit.card.json").unlink()
    elif change == "bad_line":
        path.write_text("\n".join([lines[0], lines[1][:50], lines[2]]) + "\n")
    elif change == "no_messages":
        path.write_text("\n".join([lines[0], lines[1], json.dumps({"text": "hi"})]) + "\n")
    elif change == "line_removed":
        path.write_text("\n".join(lines[:2]) + "\n")
    else:
        paths.append(exported_copy(tmp_path, KERNELGEN))
    assert main([*map(str, paths), f"model={model_dir}", f"out={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_require_card_false_takes_a_file_without_one(tmp_path: Path) -> None:
    path = exported_copy(tmp_path)
    path.with_name("fixit.card.json").unlink()
    loaded = data.load(path, require_card=False)
    assert loaded.card is None and loaded.formats == {"fixit"} and len(loaded.records) == 3
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}))
    (record,) = data.load(path, require_card=False).records
    assert (record.example.kind, record.example.task, record.example.id) == ("unknown", "unknown", f"{path}:1")


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["lora.rank=8"], "unknown setting lora.rank; did you mean lora.r?"),
        (["lr=-1"], "lr: Input should be greater than 0"),
        (["--max-steps"], "--max-steps needs a value"),
        (["lora=big"], "lora takes sub-keys, e.g. lora.r=…"),
        (["precision=fp8"], "precision: Input should be 'auto', 'bf16' or 'fp32'"),
        (["data=x.jsonl"], "give the data as paths"),
    ],
)
def test_bad_settings_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture, words: list[str], message: str
) -> None:
    assert main([str(FIXIT), "model=m", f"out={tmp_path}", *words]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_an_existing_adapter_is_not_overwritten(trained: tuple[Path, dict], model_dir: Path, capsys) -> None:
    out, _ = trained
    assert main([str(FIXIT), f"model={model_dir}", f"out={out}"]) == 2
    assert f"out={out} already holds a trained adapter" in capsys.readouterr().err


def test_a_missing_model_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(FIXIT), f"model={tmp_path / 'nowhere'}", f"out={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: model={tmp_path / 'nowhere'}: cannot load it") and err.count("\n") == 1


@pytest.mark.parametrize("word", ["help", "--help"])
def test_help_lists_every_setting_with_its_default(word: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agent.train_sft", word], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stderr == ""
    rows = {line.split()[0]: line.rstrip() for line in proc.stdout.splitlines() if line.startswith("  ")}
    keys = [f"lora.{k}" for k in LoraSettings.model_fields] + [k for k in TrainSettings.model_fields if k != "lora"]
    assert set(rows) == {*keys, "lora:", "DATA.jsonl"} - {"data"}
    for key, default in [("lora.r", "[32]"), ("lora.target_modules", "[all-linear]"), ("lr", "[0.0001]"),
                         ("max_length", "[32768]"), ("merge", "[false]"), ("require_card", "[true]")]:  # fmt: skip
        assert rows[key].endswith(default), rows[key]
    assert rows["model"].endswith("Hugging Face model name.")  # required: no default shown


def test_help_and_usage_errors_need_no_training_libraries() -> None:
    code = (
        "import sys; from agent.train_sft import main; main(['help']); main(['x.jsonl', 'lora.rank=1']);"
        "assert not {'trl', 'torch', 'transformers'} & set(sys.modules), sorted(sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == (
        "error: unknown setting lora.rank; did you mean lora.r? "
        "(known: lora.r, lora.alpha, lora.dropout, lora.target_modules)\n"
    )
