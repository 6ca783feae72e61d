"""`python -m agent.sft.tiny OUT`: a tiny random model folder built offline, which the Hugging Face loaders read
and agent.train_sft trains with the chat template it carries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.sft import tiny
from agent.train_sft import main as train_sft
from tests.agent.sft.conftest import FIXIT, KERNELGEN

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("tiny") / "model"
    # Any download would go through this proxy, which refuses: the command must need none.
    env = {**os.environ, "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    env.pop("HF_HUB_OFFLINE", None)  # the command sets it itself
    done = subprocess.run([sys.executable, "-m", "agent.sft.tiny", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    return out, done


def test_the_command_writes_a_model_folder(built: tuple[Path, subprocess.CompletedProcess]) -> None:
    out, done = built
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith(f"tiny model: {out} (Qwen3-style")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.num_hidden_layers == 2 and model.config.vocab_size == len(tok) <= 512 + len(tiny.THINK)
    chat = [{"role": "user", "content": "write a kernel"},
            {"role": "assistant", "content": "<think>\nplan\n</think>\n\n.version 8.0"}]  # fmt: skip
    text = tok.apply_chat_template(chat, tokenize=False)
    assert "<|im_start|>user\nwrite a kernel<|im_end|>" in text and "<think>\nplan\n</think>" in text
    ids = tok.apply_chat_template(chat[:1], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    generated = model.generate(**ids, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert generated.shape[1] == ids["input_ids"].shape[1] + 4


def test_train_sft_runs_on_it(built: tuple[Path, subprocess.CompletedProcess], tmp_path: Path) -> None:
    out, done = built
    assert done.returncode == 0, done.stderr
    trained = tmp_path / "sft"
    argv = [str(FIXIT), str(KERNELGEN), f"model={out}", f"out={trained}", "max_steps=1", "batch_size=2",
            "allow_mixed=true"]  # fmt: skip
    assert train_sft(argv) == 0
    record = json.loads((trained / "train.json").read_text())
    assert record["status"] == "done" and record["resolved"]["chat_template"] == "the model's own"


def test_a_folder_in_use_is_refused(built: tuple[Path, subprocess.CompletedProcess], capsys) -> None:
    out, _ = built
    assert tiny.main([str(out)]) == 2
    assert capsys.readouterr().err == f"error: {out} exists and is not an empty folder; name a new one\n"
