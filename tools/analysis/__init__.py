"""Attention analysis: statistics, seeds, residual attention, CPC context."""
