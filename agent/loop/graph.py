"""The repair loop as a LangGraph state machine. This module only wires the steps (nodes.py) and the
routers (routing.py):

  generate → extract → compile → gpu → feedback → generate …
  a failing step routes straight to feedback; feedback ends the run when a stopping rule says so.

  mode=tools: agent → tools → tools … → agent … → finish
  the agent's reply calls tools, run one per step by the tool node; submit or a spent budget ends the run.

`graph` is the compiled graph for LangGraph's own tooling (langgraph.json); `python -m agent.graph`
(agent/graph.py) prints it as Mermaid.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Checkpointer

from agent.loop import nodes, routing, tool_nodes
from agent.loop.state import LoopState, RunContext


def build_graph(checkpointer: Checkpointer = None) -> CompiledStateGraph:
    builder = StateGraph(LoopState, context_schema=RunContext)
    builder.add_node("generate", nodes.generate)
    builder.add_node("extract", nodes.extract)
    builder.add_node("compile", nodes.compile_)
    builder.add_node("gpu", nodes.gpu)
    builder.add_node("feedback", nodes.feedback)
    builder.add_node("agent", tool_nodes.agent)
    builder.add_node("tools", tool_nodes.tools)
    builder.add_node("finish", tool_nodes.finish)
    builder.add_conditional_edges(START, routing.start, {"turns": "generate", "tools": "agent"})
    builder.add_edge("generate", "extract")
    # The routers' outcomes label the edges in the drawing.
    builder.add_conditional_edges("extract", routing.after_extract, {"solution": "compile", "no_solution": "feedback"})
    builder.add_conditional_edges(
        "compile", routing.after_compile, {"gpu_ready": "gpu", "failed_or_no_gpu": "feedback"}
    )
    builder.add_edge("gpu", "feedback")
    builder.add_conditional_edges("feedback", routing.after_feedback, {"next_turn": "generate", "stop": END})
    builder.add_conditional_edges(
        "agent", routing.after_agent, {"tool_calls": "tools", "no_tool_call": "agent", "stop": "finish"}
    )
    builder.add_conditional_edges(
        "tools", routing.after_tools, {"next_call": "tools", "next_reply": "agent", "stop": "finish"}
    )
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=checkpointer, name="ptxbench-repair-loop")


def mermaid() -> str:
    """The graph as plain Mermaid, drawn from LangGraph's own description of it (its draw_mermaid writes HTML
    into the labels, <p> and &nbsp;, which a Markdown renderer shows as text): start and end as stadiums,
    the routers' outcomes as labels on dotted edges."""
    drawn = build_graph().get_graph()
    ends = {START: "START", END: "END"}  # a node labelled "end" would end a Mermaid block
    lines = ["flowchart TD"]
    lines += [f"    {key}([{ends[key]}])" if key in ends else f"    {key}[{key}]" for key in drawn.nodes]
    for edge in drawn.edges:
        arrow = f"-.->|{edge.data}|" if edge.conditional and edge.data else "-->"
        lines.append(f"    {edge.source} {arrow} {edge.target}")
    return "\n".join(lines) + "\n"


graph = build_graph()
