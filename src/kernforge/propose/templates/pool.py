"""Placeholder: filled in by the pool family work."""

FAMILIES: list = []
