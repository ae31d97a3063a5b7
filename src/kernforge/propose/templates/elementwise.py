"""Placeholder: filled in by the elementwise family work."""

FAMILIES: list = []
