"""The harness as an MCP server (the official `mcp` SDK, the `mcp` extra): any MCP client — a coding agent, an
IDE, another benchmark's agent — lists our tasks and compiles, evaluates, profiles and sanitizes answers on
the configured GPU pool. `python -m tools.mcp` serves it over stdio or streamable HTTP."""
