"""The GPU harness: the prepared run, XLA modules, the kernels' check."""
