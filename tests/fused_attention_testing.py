"""The fused kernels' NumPy reference and random pieces, for the tests."""

# pylint: disable=unused-import
from etc_realformer.kernels.reference import LongSideCase
from etc_realformer.kernels.reference import long_side_pieces
from etc_realformer.kernels.reference import long_side_reference
from etc_realformer.kernels.reference import NEG
from etc_realformer.kernels.reference import relative_error
