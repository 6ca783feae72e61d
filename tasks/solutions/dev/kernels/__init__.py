"""Triton kernels behind the reference solutions (our own code), and how each is launched.

Every kernel module exposes a frozen config dataclass and `program(task, config, arch)`, which returns
the `Program` (launches in order, plus scratch buffers; see `launch.py`) that one task needs. The same
description drives both paths: `tasks/solutions/dev/generate.py` compiles it to PTX + LaunchSpec, and
`launch.prepare_program` calls the kernels on torch tensors (GPU tuning, or the CPU interpreter in tests).
"""
