"""Fused attention kernels: Triton on CUDA, C++ on the host, called from
the TensorFlow graph as XLA custom calls (`etc_realformer.attention.fused`)."""
