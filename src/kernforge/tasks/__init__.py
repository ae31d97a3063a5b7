"""tasks: one KernelTask per hot signature, with its reference op and real inputs."""

from kernforge.tasks.task import KernelTask, load_task, make_tasks, resolve_op, save_task

__all__ = ["KernelTask", "load_task", "make_tasks", "resolve_op", "save_task"]
