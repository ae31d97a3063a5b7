"""The candidate file in an LLM's reply, whatever shape the reply takes.

Replies come as one fenced block, several (a kernel, then "usage" or a test), prose
around them, a block left open where the reply hit its token limit, or bare code.
The file is the last block in the backend's language that defines kf_forward, with
the blocks it calls into (a kernel in one block, its launcher in the next) put
before it; a reply without such a block has no candidate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernforge.backends import Prompt, get_backend

_FENCE = re.compile(r"^(```|~~~)[ \t]*([\w+.-]*)[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)
_OPEN_FENCE = re.compile(r"^(```|~~~)[ \t]*([\w+.-]*)[^\n]*\n", re.M)


@dataclass
class Extracted:
    source: str | None
    why_not: str = ""  # when there is no source: what the reply held instead
    idea: str = ""  # the reply's own one-line account of the kernel ("Idea: ...")


def extract_candidate(reply: str, backend: str) -> Extracted:
    prompt = get_backend(backend).prompt  # its fence tags and what a definition looks like
    idea = _idea(reply)
    blocks = [(tag.lower(), body) for _, tag, body in _FENCE.findall(reply)]
    ours = [body for tag, body in blocks if not tag or tag in prompt.fence_tags]
    entries = [b for b in ours if _defines_entry(b, prompt)]
    if entries:
        return Extracted(_with_helpers(entries[-1], [b for b in ours if b is not entries[-1]], prompt),
                         idea=idea)
    if _cut_off(reply):
        return Extracted(None, "the reply was cut off inside its code block (its token limit?)", idea)
    if not blocks and _defines_entry(reply, prompt):
        return Extracted(reply.strip() + "\n", idea=idea)
    if blocks:
        tags = ", ".join(sorted({t or "untagged" for t, _ in blocks}))
        return Extracted(None, f"no code block defines kf_forward ({len(blocks)} blocks: {tags})", idea)
    return Extracted(None, "the reply held no code block", idea)


def _with_helpers(entry: str, others: list[str], prompt: Prompt) -> str:
    """The entry block, after the other blocks that define a name it uses and it does not define."""
    own = set(re.findall(prompt.defines, entry, re.M))
    needed = [b for b in others
              if any(name not in own and re.search(rf"\b{name}\b", entry)
                     for name in re.findall(prompt.defines, b, re.M))]
    return "\n\n".join([*needed, entry]).strip() + "\n"


def _defines_entry(text: str, prompt: Prompt) -> bool:
    """Whether the text defines kf_forward (a call of it, in a usage note, does not count)."""
    return bool(re.search(prompt.entry, text, re.M))


def _cut_off(reply: str) -> bool:
    return len(_OPEN_FENCE.findall(reply)) > 2 * len(_FENCE.findall(reply))


def _idea(reply: str) -> str:
    match = re.search(r"^\W*idea\W*:?\**\s*(.+)$", reply, re.I | re.M)
    if match:
        return match.group(1).strip()[:300]
    prose = next((line.strip() for line in reply.splitlines()
                  if line.strip() and not line.lstrip().startswith(("```", "~~~"))), "")
    return prose[:300]
