"""CASE  py-builtins-eval
CLASS scan-evasion: eval reached through __builtins__

MECHANISM  __builtins__["eval"]("torch." + "softmax") returns the library op; it is called
on x.

WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  The dynamic-code rule flags calls of the bare
names eval/exec/getattr/...; a subscript of __builtins__ is not a name, and the string is
not code to the AST walk.

EXPECTED  cheat (library op / dynamic code)
"""
import torch

_b = __builtins__ if isinstance(__builtins__, dict) else __builtins__.__dict__


def kf_forward(x, dim, half_to_float):
    return _b["eval"]("torch." + "softmax")(x, dim)
