"""Tests for tools/gpu_kernel_check.py on the CPU: the host handlers,
registered into jaxlib from the FFI library, pass the check."""

import json

from etc_realformer.kernels import ffi_library
from tools import gpu_kernel_check


def test_host_handlers_pass_the_check(tmp_path):
  library = ffi_library.load_into_tensorflow()
  out = tmp_path / "kernels.jsonl"
  assert gpu_kernel_check.main([f"--library={library}", "--device=cpu",
                                "--no_timing", f"--output_jsonl={out}"]) == 0
  records = [json.loads(line) for line in out.read_text().splitlines()]
  assert len(records) == 6  # 3 dtypes, with and without relative ids
  assert all(r["ok"] and r["finite"] and r["masked_rows_zero"]
             for r in records)
  assert max(r["ctx_relative_error"] for r in records
             if r["dtype"] == "float32") < 1e-5


def test_floor_figures_count_every_input_once():
  reference = gpu_kernel_check._reference_module()  # pylint: disable=protected-access
  case = reference.LongSideCase(batch=1, num_heads=1, num_blocks=2,
                                block_len=4, global_len=3, size_per_head=16,
                                num_ids=5)
  traffic = gpu_kernel_check.long_side_traffic(case, dtype_bytes=2)
  lp, b, g, d = 8, 4, 3, 16
  qkv = 2 * d * (lp + 2 * (lp + 2 * b) + 2 * g)  # q, band k/v, global k/v
  masks = 4 * lp * (5 + 1) + lp * (16 + g)  # per_id, valid; int8 codes
  written = 2 * d * lp + 4 * lp
  assert traffic["bytes"] == qkv + masks + written
  assert traffic["flops"] == 4 * lp * (3 * b + g) * d


def test_a_missing_library_is_one_line(capsys, tmp_path):
  assert gpu_kernel_check.main([f"--library={tmp_path}/none.so"]) == 2
  assert "no such file" in capsys.readouterr().err
