"""The trajectory inspector: a static site (no server, no network) for reading a run or a whole bench in the
browser, turn by turn (`python -m agent.inspect` is the command)."""
