"""Fixtures of the SFT tests: the exported fixture files and a tiny model folder built here. The Hugging Face
libraries read their offline switches once, when first imported, so they are set before any test module loads."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

EXPORTED = Path(__file__).resolve().parents[2] / "fixtures" / "sft" / "exported"
FIXIT, HOLDOUT, KERNELGEN = (EXPORTED / n for n in ("fixit.jsonl", "fixit.holdout.jsonl", "kernelgen.jsonl"))


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agent.sft import tiny

    return tiny.model_folder(tmp_path_factory.mktemp("tiny-qwen3"), tiny.texts([FIXIT, HOLDOUT, KERNELGEN]))


@pytest.fixture(autouse=True, scope="module")
def _collect_training_garbage() -> Iterator[None]:
    """Training leaves reference cycles with finalizers behind. CPython 3.11 keeps the AST builder's recursion
    depth per interpreter, not per thread, so a later collection that runs those finalizers in the middle of
    an ast.parse lets another thread parse too, and agent.bench's worker threads (tasks/expr.py) then fail
    with "AST constructor recursion depth mismatch" (seen in tests/agent/bench/test_bench.py). Collect them here."""
    yield
    gc.collect()
