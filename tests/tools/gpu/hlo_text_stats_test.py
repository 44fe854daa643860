"""Tests for tools/gpu/hlo_text_stats.py: the buffers a module writes, from
its HLO text."""

from tools.gpu import hlo_text_stats


_HLO = """HloModule m

%fused_computation (p0: f32[4,8]) -> f32[4,8] {
  %p0 = f32[4,8]{1,0} parameter(0)
  %inside = f32[4,8]{1,0} exponential(%p0)
  ROOT %twice = f32[4,8]{1,0} add(%inside, %inside)
}

%body (t: (s32[], f32[16])) -> (s32[], f32[16]) {
  %t = (s32[], f32[16]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %v = f32[16]{0} get-tuple-element(%t), index=1
  %w = f32[16]{0} negate(%v), metadata={op_name="loop/Neg"}
  ROOT %r = (s32[], f32[16]{0}) tuple(%i, %w)
}

ENTRY %main (a: f32[4,8], b: (s32[], f32[16])) -> f32[4,8] {
  %a = f32[4,8]{1,0} parameter(0)
  %b = (s32[], f32[16]{0}) parameter(1)
  %loop = (s32[], f32[16]{0}) while(%b), condition=%cond, body=%body
  %d = bf16[4,8]{1,0} convert(%a), metadata={op_name="model/Cast"}
  ROOT %f = f32[4,8]{1,0} fusion(%a), kind=kLoop, calls=%fused_computation
}
"""


def test_written_buffers_skip_fusion_internals_and_follow_loops():
  written = hlo_text_stats.materialized_buffers(_HLO)
  by_name = {b["name"]: b for b in written}
  # The fusion writes its output once; what it computes inside is not
  # written. The loop body's negate is; parameters and tuples are not.
  assert sorted(by_name) == ["d", "f", "w"]
  assert by_name["f"]["bytes"] == 4 * 8 * 4
  assert by_name["d"]["bytes"] == 4 * 8 * 2
  assert by_name["w"]["op_name"] == "loop/Neg"


def test_text_stats_count_fusions_and_group_buffers_by_type():
  stats = hlo_text_stats.text_stats(_HLO, top=2)
  assert stats["fusions"] == 1
  assert stats["written_buffers"] == 3
  # The largest first; of equal sizes, the first written.
  assert [b["name"] for b in stats["largest_buffers"]] == ["f", "d"]
  assert stats["largest_buffers"][1]["op_name"] == "model/Cast"
  types = {g["type"]: g["count"] for g in stats["buffer_groups"]}
  assert types == {"f32[4,8]": 1, "bf16[4,8]": 1, "f32[16]": 1}
  assert hlo_text_stats.text_stats("")["written_buffers"] == 0


def test_custom_calls_are_summed_by_target():
  text = """HloModule m

ENTRY %main (a: f32[1024,1024]) -> f32[512,1024] {
  %a = f32[1024,1024]{1,0} parameter(0)
  %side = (f32[1024,1024]{1,0}, f32[1024]{0}) custom-call(%a), custom_call_target="etc_branch_forward", api_version=API_VERSION_TYPED_FFI
  %again = (bf16[1024,1024]{1,0}, f32[1024]{0}) custom-call(%a), custom_call_target="etc_branch_forward", api_version=API_VERSION_TYPED_FFI
  ROOT %gemm = f32[512,1024]{1,0} custom-call(%a), custom_call_target="__cublas$gemm"
}
"""
  written = hlo_text_stats.materialized_buffers(text)
  assert [b["target"] for b in written] == [
      "etc_branch_forward", "etc_branch_forward", "__cublas$gemm"]
  stats = hlo_text_stats.text_stats(text)
  # 4 MiB and 2 MiB of scores, 4 KiB of row statistics each; 2 MiB.
  assert stats["custom_call_mib"] == {"__cublas$gemm": 2.0,
                                      "etc_branch_forward": 6.0}
  assert stats["written_mib"] == 8.0
