"""The kernforge command line: one module per group of commands (search, runs, integrate), the
shared options, the consoles and the live progress view."""

from __future__ import annotations

import sys

import typer

from kernforge.cli import console
from kernforge.cli.app import app, click_errors
from kernforge.errors import UserError

# Each registers its commands on the app, in the order the help lists them.
from kernforge.cli import search  # noqa: E402, F401, I001
from kernforge.cli import runs  # noqa: E402, F401
from kernforge.cli import integrate  # noqa: E402, F401


def main() -> None:
    """Every error a user can cause is one line and exit 2: kernforge's own (UserError) and the
    command line's (a bad value, an unknown option), which click would draw in a box."""
    try:
        code = app(standalone_mode=False, prog_name="kernforge")
    except UserError as e:
        console.err.print(f"error: {e}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except click_errors.NoArgsIsHelpError as e:
        console.out.print(e.ctx.get_help() if e.ctx else "", markup=False, highlight=False)
        sys.exit(0)
    except click_errors.ClickException as e:
        where = getattr(e, "ctx", None)
        hint = f" (see {where.command_path} --help)" if where is not None else ""
        console.err.print(f"error: {' '.join(e.format_message().split())}{hint}", markup=False, highlight=False,
                  soft_wrap=True)
        sys.exit(e.exit_code)
    except typer.Abort:
        console.err.print("aborted", markup=False, highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        console.err.print("interrupted", markup=False, highlight=False)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
