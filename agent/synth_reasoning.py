"""`python -m agent.synth_reasoning DATA.jsonl llm=openai llm.model=M out=FILE.jsonl [key=value …]`: a model
writes the reasoning (the <think> part of each example's final message) that leads from the failed attempt,
through its evaluation log, to the fixed kernel; agent/sft/synth.py says what is kept and what is dropped.

The kernel and launch spec are never changed. OUT gets a data card (OUT.card.md/.json) naming the reasoning
model; the API key comes from the environment variable llm.api_key_env and is never written.
Exit status: 0 written; 1 the endpoint failed after its retries (nothing written); 2 usage, configuration or
data error.
"""

from __future__ import annotations

import shlex
import sys

from agent import cli
from tools.extras import needs

with needs("agent", "python -m agent.synth_reasoning"):
    from agent.loop.journal import Journal
    from agent.loop.policies.base import ModelError
    from agent.sft.settings import SynthSettings
    from agent.sft.synth import synthesize

SYNOPSIS = "python -m agent.synth_reasoning DATA.jsonl llm=openai llm.model=M out=FILE.jsonl [key=value …]"


def usage() -> str:
    return cli.usage(SynthSettings, SYNOPSIS, __doc__, "data", "DATA.jsonl")


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _synthesize, argv)


def _synthesize(argv: list[str]) -> int:
    settings = cli.read(SynthSettings, argv, "data")
    try:
        command = shlex.join(["python", "-m", "agent.synth_reasoning", *argv])
        result = synthesize(settings, command, Journal("synth_reasoning"))
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    dropped = ", ".join(f"{k} {v}" for k, v in sorted(result.dropped.items())) or "none"
    print(
        f"reasoning: {result.read} examples → {result.synthesized} synthesized, {result.kept} kept as recorded, "
        f"dropped {dropped} → {result.out}"
    )
    print(f"data card: {result.card_md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
