"""Placeholder: filled in by the reduce family work."""

FAMILIES: list = []
