"""The fused kernels' build and inspection: cubins, SASS, grids, traces."""
