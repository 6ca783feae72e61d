"""`python -m agent.train_sft DATA.jsonl [more…] model=PATH_OR_NAME out=DIR [key=value …]`: LoRA fine-tuning
on exported SFT data (agent.sft.export) with TRL's SFTTrainer; agent/sft/train.py says how.

Needs the train extra (pip install 'ptxbench[train]') and one GPU for a real model; writes OUT/train.json,
OUT/adapter/ and, with merge=true, OUT/merged/ (serve it with vLLM or SGLang, then run agent.bench against
it: docs/training.md).
Exit status: 0 trained; 2 usage, configuration or data error (nothing trained).
"""

from __future__ import annotations

import shlex
import sys

from agent import cli
from tools.extras import needs

with needs("agent", "python -m agent.train_sft"):
    from agent.sft.settings import TrainSettings

SYNOPSIS = "python -m agent.train_sft DATA.jsonl [more…] model=PATH_OR_NAME out=DIR [key=value …]"


def usage() -> str:
    return cli.usage(TrainSettings, SYNOPSIS, __doc__, "data", "DATA.jsonl …")


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _train, argv)


def _train(argv: list[str]) -> int:
    settings = cli.read(TrainSettings, argv, "data")
    with needs("train", "python -m agent.train_sft"):
        from agent.sft import train  # torch, transformers and TRL: only once there is something to train
    prepared = train.prepare(settings, shlex.join(["python", "-m", "agent.train_sft", *argv]))
    print(train.summary(prepared), flush=True)
    record = train.run(prepared)
    print(train.finished(record, settings.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
