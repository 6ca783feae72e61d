"""The harness: compile, inspect, launch, check, time and profile a Solution; usable without the agent."""
