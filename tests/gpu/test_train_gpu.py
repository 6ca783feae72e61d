"""`python -m agent.train_sft` on a GPU: the tiny random-init Qwen3-style model (agent/sft/tiny.py) in
bf16 for a few optimizer steps on the exported fixtures, then the adapter reloaded on the GPU. Needs the train
extra (trl and datasets travel as wheels to the GPU image); downloads nothing."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXPORTED = REPO / "tests" / "fixtures" / "sft" / "exported"
STEPS = 4


@pytest.mark.gpu
def test_lora_training_in_bf16_on_the_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # read once, when huggingface_hub is first imported (below)
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agent.sft import tiny

    files = [EXPORTED / n for n in ("fixit.jsonl", "kernelgen.jsonl", "fixit.holdout.jsonl")]
    model_dir = tiny.model_folder(tmp_path / "tiny", tiny.texts(files))
    out = tmp_path / "out"
    # One GPU, in a process of its own: the trainer refuses several, and this process's CUDA already saw them all.
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": first, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [*map(str, files[:2]), f"model={model_dir}", f"out={out}", "precision=bf16", f"max_steps={STEPS}",
            "batch_size=2", "grad_accum=1", "allow_mixed=true", "merge=true", f"eval_data={files[2]}"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "agent.train_sft", *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    record = json.loads((out / "train.json").read_text())
    assert record["resolved"]["precision"] == "bf16" and record["resolved"]["device"].startswith("NVIDIA")
    assert record["result"]["steps"] == STEPS
    assert math.isfinite(record["result"]["train_loss"]) and math.isfinite(record["result"]["eval_loss"])
    assert json.loads((out / "merged" / "config.json").read_text())["dtype"] == "bfloat16"

    tok = AutoTokenizer.from_pretrained(out / "adapter")
    inputs = tok("ld.param.u64 %rd1, [c];", return_tensors="pt").to("cuda")
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to("cuda")
    with torch.no_grad():
        adapted = PeftModel.from_pretrained(base, out / "adapter").eval()
        assert all(p.device.type == "cuda" for p in adapted.parameters())
        after = adapted(**inputs).logits.float()
        merged = AutoModelForCausalLM.from_pretrained(out / "merged").to("cuda")(**inputs).logits.float()
    torch.testing.assert_close(merged, after, rtol=0.05, atol=0.05)  # bf16: merged weights are rounded once more
