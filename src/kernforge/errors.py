"""Errors a user can cause. The CLI prints them as one line and exits non-zero."""


class UserError(Exception):
    """A problem with the user's input or machine; the message names the fix."""
