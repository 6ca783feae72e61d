"""A tiny tokenizer with a ChatML template, trained here (no download), for the trainers' own prompt handling."""

from __future__ import annotations

import pytest

from agent.rl.dataset import build_rows
from agent.sft.tiny import tokenizer
from tests.agent.rl.verdicts import ANSWERS

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")  # fmt: skip


@pytest.fixture(scope="session")
def tiny_tokenizer():
    (row,) = build_rows("trl", ["gemm"], ["sm_90a"], trials=3, target_speedup=1.0, max_turns=1, prompt="none")
    tok = tokenizer([m["content"] for m in row["prompt"]] + list(ANSWERS)[:3] + ["system\nuser\nassistant\n"])
    tok.chat_template = CHATML
    return tok
