"""Errors a user can cause. The CLI prints them as one line and exits non-zero.

Strict mode (--strict, or KERNFORGE_STRICT=1 in the environment) re-raises what would otherwise
be one line or a rejected candidate, traceback and all, for debugging kernforge itself."""

import os


class UserError(Exception):
    """A problem with the user's input or machine; the message names the fix."""


_STRICT = [os.environ.get("KERNFORGE_STRICT") == "1"]


def strict() -> bool:
    """Whether failures that kernforge turns into data or one line should raise instead."""
    return _STRICT[0]


def set_strict(on: bool) -> None:
    _STRICT[0] = on
