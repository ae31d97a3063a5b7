"""Placeholder: filled in by the norms family work."""

FAMILIES: list = []
