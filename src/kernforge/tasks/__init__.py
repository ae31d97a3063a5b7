"""tasks: one KernelTask per hot signature or fused chain, with its reference and real inputs."""

from kernforge.tasks.chain import ChainReference, chain_program, reference_of
from kernforge.tasks.task import load_task, make_task_id, make_tasks, resolve_op, save_task, task_label

__all__ = ["ChainReference", "chain_program", "load_task", "make_task_id", "make_tasks", "reference_of",
           "resolve_op", "save_task", "task_label"]
