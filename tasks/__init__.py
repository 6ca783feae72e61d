"""Task definitions (data), their fp32 PyTorch references, input draws and frontier baselines."""

from tasks.catalog import CORE, TASKS, get_task

__all__ = ["CORE", "TASKS", "get_task"]
