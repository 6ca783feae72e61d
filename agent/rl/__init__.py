"""The harness for RL trainers: scorers (the HTTP service, or this process's pool), thin reward adapters for
TRL, verl and OpenRLHF, a multi-turn environment (SkyRL's text-environment shape), and the prompt dataset.
No trainer's code is imported: each adapter is the function or object its trainer calls."""
