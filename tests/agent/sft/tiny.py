"""A tiny Qwen3-style causal LM with random weights, and a byte-level BPE tokenizer trained here with the
chat special tokens, saved as a model folder: the training tests need no download."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK = ["<think>", "</think>"]  # added tokens, not special ones, as in Qwen3's own tokenizer


def texts(paths: list[Path]) -> list[str]:
    """Every message of the exported files, plus the words the chat template writes."""
    found = ["system\nuser\nassistant\n"]
    for path in paths:
        for line in path.read_text().splitlines():
            found += [m["content"] for m in json.loads(line)["messages"]]
    return found


def tokenizer(corpus: list[str], vocab_size: int = 512) -> PreTrainedTokenizerFast:
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.add_tokens(THINK)
    return tok


def model_folder(path: Path, corpus: list[str]) -> Path:
    """A saved model folder (config, random weights, tokenizer without a chat template) at `path`."""
    tok = tokenizer(corpus)
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
