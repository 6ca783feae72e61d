"""`python -m agent.graph`: the repair loop's graph (agent/loop/graph.py) drawn as Mermaid by LangGraph."""

from __future__ import annotations

from agent.loop.graph import mermaid

if __name__ == "__main__":
    print(mermaid(), end="")
