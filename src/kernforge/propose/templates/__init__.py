"""Kernel templates of the built-in proposer, one module per op family."""
