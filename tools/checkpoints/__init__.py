"""Checkpoint binaries: released checkpoints converted, BERT lifted to ETC."""
