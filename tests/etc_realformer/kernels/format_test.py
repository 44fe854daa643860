"""Tests for etc_realformer/kernels/format.py: the C++ handlers read the
same rules (cc/format.h is the one `cc_header` writes)."""

import pathlib

from etc_realformer.kernels import format as kernel_format

HEADER = (pathlib.Path(kernel_format.__file__).parent / "cc" / "format.h")


def test_the_handlers_header_is_the_generated_one():
  # On a change of format.py, rewrite it: python -c "from
  # etc_realformer.kernels import format; print(format.cc_header(),
  # end='')" > etc_realformer/kernels/cc/format.h
  assert HEADER.read_text() == kernel_format.cc_header()


def test_codes_hold_an_id_in_seven_bits():
  assert kernel_format.MASKED + kernel_format.MAX_ID < kernel_format.NO_ID < 0
  assert kernel_format.NO_ID == kernel_format.MASKED + 127


def test_band_rows_are_padded_to_16_bytes():
  assert [kernel_format.band_stride(b) for b in (5, 6, 16, 64)] == [
      16, 32, 48, 192]


def test_each_branch_kernel_is_named_once():
  assert len(set(kernel_format.KERNELS)) == 3
  assert all(k.startswith("branch_") for k in kernel_format.KERNELS)
  assert kernel_format.FORWARD_TARGET != kernel_format.BACKWARD_TARGET
