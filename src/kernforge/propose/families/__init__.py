"""The built-in proposer's families of kernels: one package per family.

A family package holds:

    __init__.py      match (task -> facts, or why not), the space per backend (variants and
                     the parameters each reads, with the constraints between them:
                     builtin/space.py), the starting rule, render and explain, exported as
                     FAMILIES, a list of builtin.family.Family;
    kernels/         one real kernel file per backend and variant, named BACKEND_VARIANT.EXT
                     (BACKEND.EXT where a backend has one): triton .py, cpu .c, cuda .cu;
                     code several of them share in a shared_* part, included by a line.

kernels/ here holds the parts every family's kernels may include (shared_c_math.c: the C
kernels' exp and tanh); a family's own part of the same name comes first.

Render reads a kernel file and rewrites its `kf-op:` line and its constants block, nothing
else (builtin/kernel_file.py): a move is an edit of constants, and the files are what the
LLM generator is shown as worked examples. The starting rule reads the task's facts (bytes
to move, rows and row length against the SMs and the L2, layout, dtype) and the hardware's
(builtin.family.Hardware), never a table of shapes.
"""
