"""The repair loop: a LangGraph state machine (graph, state, nodes, routing), the policies that answer,
the prompts and feedback they read, and the run folder every turn is written to."""
