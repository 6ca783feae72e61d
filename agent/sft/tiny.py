"""`python -m agent.sft.tiny OUT [vocab_size=N]`: a tiny Qwen3-style causal LM with random
weights and a byte-level BPE tokenizer trained here (the chat special tokens, <think> and </think>, and Qwen3's
chat template), saved as a model folder at OUT, offline: nothing is downloaded. It has learnt nothing; it is for
smoke runs of a pipeline (agent.train_sft model=OUT, a GRPO trainer on agent.rl_prompts) on a CPU.

The tokenizer learns from the reference answers (tasks/solutions): PTX and the Markdown around it.
Needs the train extra (pip install 'ptxbench[train]'). Exit status: 0 written; 2 usage error or OUT not empty.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pydantic import BaseModel, Field

from agent import cli
from tasks.solutions import available, reference_answer
from tools.extras import needs

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK = ["<think>", "</think>"]  # added tokens, not special ones, as in Qwen3's own tokenizer
CHAT_WORDS = "system\nuser\nassistant\n"  # what the chat template writes around the messages


class TinySettings(BaseModel):
    out: list[Path] = Field(min_length=1, max_length=1, description="The model folder to write (new or empty).")
    vocab_size: int = Field(512, ge=300, description="The BPE vocabulary, the special and added tokens included.")


def texts(paths: list[Path]) -> list[str]:
    """Every message of exported SFT files, plus the words the chat template writes."""
    found = [CHAT_WORDS]
    for path in paths:
        for line in path.read_text().splitlines():
            found += [m["content"] for m in json.loads(line)["messages"]]
    return found


def reference_texts() -> list[str]:
    """The reference answers (Markdown with PTX), plus the words the chat template writes."""
    return [CHAT_WORDS, *(reference_answer(task, arch) or "" for task, arch in available())]


def tokenizer(corpus: list[str], vocab_size: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=SPECIAL,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.add_tokens(THINK)
    return tok


def model_folder(path: Path, corpus: list[str], chat_template: bool = False, vocab_size: int = 512) -> Path:
    """A saved model folder at `path`: config, random weights (seeded: the same folder every time) and the
    tokenizer, with Qwen3's chat template (TRL's copy) where `chat_template`."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = tokenizer(corpus, vocab_size)
    if chat_template:
        from trl.chat_template_utils import qwen3_chat_template

        tok.chat_template = qwen3_chat_template
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def usage() -> str:
    return cli.usage(TinySettings, "python -m agent.sft.tiny OUT [key=value …]", __doc__, "out", "OUT")


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _build, argv)


def _build(argv: list[str]) -> int:
    settings = cli.read(TinySettings, argv, "out")
    (out,) = settings.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise cli.ConfigError(f"{out} exists and is not an empty folder; name a new one")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read by the Hugging Face libraries when first imported
    with needs("train", "python -m agent.sft.tiny"):  # said before anything is built
        import tokenizers  # noqa: F401
        import trl  # noqa: F401
        from transformers.utils import logging
    logging.disable_progress_bar()  # a bar for writing one small file
    model_folder(out, reference_texts(), chat_template=True, vocab_size=settings.vocab_size)
    print(f"tiny model: {out} (Qwen3-style, random weights, {settings.vocab_size}-token BPE, Qwen3 chat template)")
    print(f"try: python -m agent.train_sft DATA.jsonl model={out} out=OUT max_steps=2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
