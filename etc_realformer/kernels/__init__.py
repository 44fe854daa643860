"""Fused CPU kernels (C++ custom ops) and their Python side."""
