"""The built-in kernels are files: each variant of each family is a readable, complete kernel
in the family's `kernels/` folder (propose/families/FAMILY/kernels/BACKEND_VARIANT.EXT).

A kernel file is what a candidate's source is, with example values:

    a header naming the op on a `kf-op:` line,
    a constants block between a `kf-constants: begin` line and a `kf-constants: end` line,
    the kernels, the launcher, and kf_forward.

Rendering a candidate rewrites the `kf-op:` line and the constants block and nothing else,
so a built-in move is an edit of constants, and the same files serve as the LLM
generator's worked examples. In Python (Triton) files a constant is `NAME = repr(value)`;
in C and CUDA files it is `#define NAME value`. A Snippet is a piece of code put in the
block as it is (an element-wise op's formula), named by the function or macro it defines.

Code that several of a family's kernel files share is written once, in a kernels/shared_*
file, and stands in each of them as one `kf-include: shared_NAME` line; reading a kernel file
puts the shared file's text in that line's place, so a candidate's source is whole.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

BEGIN = "kf-constants: begin"
END = "kf-constants: end"
_OP_LINE = re.compile(r"^(.*kf-op: )(\S+)(.*)$", re.MULTILINE)
_PY_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*) = ", re.MULTILINE)
_C_NAME = re.compile(r"^#define ([A-Za-z_][A-Za-z0-9_]*)\b", re.MULTILINE)
_SNIPPET_NAME = r"\b{}\s*\("  # a snippet defines a function or a function-like macro
SHARED = "shared_"  # a kernels/ file named so is included by kernel files, not a kernel itself
FAMILIES_PACKAGE = "kernforge.propose.families"  # its kernels/ holds the parts every family may include
_INCLUDE_LINE = re.compile(rf"^.*kf-include: ({SHARED}\S+).*\n", re.MULTILINE)


@dataclass(frozen=True)
class Snippet:
    """Code put in the constants block as it is."""

    text: str


class KernelFileError(ValueError):
    """A kernel file without its markers, or a render that names other constants than it."""


@functools.cache
def read(family_package: str, filename: str) -> str:
    """The text of kernels/FILENAME in a family's package (kernforge.propose.families.NAME), each
    `kf-include: shared_PART` line replaced by the text of kernels/shared_PART: the family's own,
    else the one every family shares (propose/families/kernels/, the C kernels' math)."""
    folder = resources.files(family_package).joinpath("kernels")
    every_family = resources.files(FAMILIES_PACKAGE).joinpath("kernels")

    def part(name: str) -> str:
        own = folder.joinpath(name)
        return (own if own.is_file() else every_family.joinpath(name)).read_text()
    return _INCLUDE_LINE.sub(lambda m: part(m.group(1)), folder.joinpath(filename).read_text())


def style_of(filename: str) -> str:
    return "python" if filename.endswith(".py") else "c"


def split(text: str) -> tuple[str, str, str]:
    """(everything up to and including the begin line, the block, the end line and after)."""
    begin = text.find(BEGIN)
    end = text.find(END)
    if begin < 0 or end < begin:
        raise KernelFileError(f"a kernel file needs a '{BEGIN}' line and a '{END}' line after it")
    head_end = text.index("\n", begin) + 1
    tail_start = text.rfind("\n", 0, end) + 1
    return text[:head_end], text[head_end:tail_start], text[tail_start:]


def constant_names(block: str, style: str) -> list[str]:
    return (_PY_NAME if style == "python" else _C_NAME).findall(block)


def render(text: str, op: str, constants: dict[str, Any], style: str) -> str:
    """`text` with its op and constants block replaced. The constants must be exactly the
    block's names (plain constants), so that a render cannot silently leave a default in."""
    head, block, tail = split(text)
    plain = [name for name, value in constants.items() if not isinstance(value, Snippet)]
    expected = constant_names(block, style)
    if sorted(plain) != sorted(expected):
        missing, extra = sorted(set(expected) - set(plain)), sorted(set(plain) - set(expected))
        raise KernelFileError(f"constants differ from the kernel file's: missing {missing}, unknown {extra}")
    for name, value in constants.items():
        if isinstance(value, Snippet) and not re.search(_SNIPPET_NAME.format(re.escape(name)), block):
            raise KernelFileError(f"the kernel file's constants block defines no {name}()")
    lines = [value.text.rstrip("\n") if isinstance(value, Snippet) else _line(name, value, style)
             for name, value in constants.items()]
    head, count = _OP_LINE.subn(lambda m: m.group(1) + op + m.group(3), head, count=1)
    if not count:
        raise KernelFileError("a kernel file names its op on a 'kf-op:' line before its constants")
    return head + "\n".join(lines) + "\n" + tail


def _line(name: str, value: Any, style: str) -> str:
    if style == "python":
        return f"{name} = {value!r}"
    return f"#define {name} {c_literal(value)}"


def c_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value) if value == value and value not in (float("inf"), float("-inf")) else \
            ("(1.0/0.0)" if value > 0 else "(-1.0/0.0)" if value < 0 else "(0.0/0.0)")
    return str(value)  # ints, and names (a C token: static, KF_F32, float...)
