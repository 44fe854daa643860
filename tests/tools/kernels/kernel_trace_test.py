"""Tests for tools/kernels/kernel_trace.py: kernels read from a profiler trace
(an XSpace, decoded without protobuf) and summarised per call."""

from tools.kernels import kernel_trace


def test_kernel_summary_per_call_by_kind_and_longest():
  events = [("loop_add_fusion_3", 4e6), ("loop_add_fusion_3", 4e6),
            ("sm90_xmma_gemm_bf16bf16", 10e6),
            ("sm90_xmma_gemm_bf16bf16", 10e6),
            ("input_reduce_fusion", 2e6), ("input_reduce_fusion", 2e6),
            ("Memcpy DtoD", 1e6), ("nvjet_sm90_tst_128x160_h_bz_TNT", 2e6),
            ("wrapped_transpose", 2e6)]
  summary = kernel_trace.kernel_summary(
      events, runs=2, op_names={"loop_add_fusion_3": "layer_0/add"})
  assert summary["kernel_ms_per_call"] == 18.5
  assert summary["kernels_per_call"] == 4.5
  kinds = {k["kind"]: k for k in summary["by_kind"]}
  assert kinds["gemm"]["ms"] == 11.0 and kinds["loop"]["ms"] == 4.0
  assert kinds["transpose"]["ms"] == 1.0
  assert kinds["input"]["ms"] == 2.0 and kinds["copy"]["ms"] == 0.5
  assert abs(sum(k["share"] for k in summary["by_kind"]) - 1) < 1e-2
  longest = summary["longest"]
  assert [k["kernel"] for k in longest][:2] == ["sm90_xmma_gemm_bf16bf16",
                                                "loop_add_fusion_3"]
  assert longest[1]["op_name"] == "layer_0/add"
  assert longest[1]["per_call"] == 1.0


def test_trace_kernels_reads_device_streams_only():
  # An XSpace as the profiler writes it, built with TensorFlow's own
  # protocol buffer classes; kernel_trace decodes it without them.
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  space = xplane_pb2.XSpace()
  host = space.planes.add(name="/host:CPU")
  host.event_metadata[1].name = "host_op"
  host.lines.add(name="Stream #1").events.add(metadata_id=1,
                                              duration_ps=9_000_000)
  gpu = space.planes.add(name="/device:GPU:0")
  gpu.event_metadata[7].name = "loop_add_fusion_3"
  gpu.event_metadata[300].name = "sm90_xmma_gemm"
  stream = gpu.lines.add(name="Stream #13(Compute)")
  stream.events.add(metadata_id=7, offset_ps=5, duration_ps=2_500_000)
  stream.events.add(metadata_id=300, offset_ps=9, duration_ps=4_000_000)
  derived = gpu.lines.add(name="XLA Ops")
  derived.events.add(metadata_id=7, duration_ps=2_500_000)
  events = kernel_trace.trace_kernels(space.SerializeToString())
  assert events == [("loop_add_fusion_3", 2500.0), ("sm90_xmma_gemm", 4000.0)]


def test_proto_fields_decode_every_wire_type():
  # Field 1 varint 300, field 2 bytes "hi", field 3 fixed64, field 4
  # fixed32.
  message = (b"\x08\xac\x02" + b"\x12\x02hi" + b"\x19" + bytes(range(8)) +
             b"\x25" + bytes(range(4)))
  assert list(kernel_trace.proto_fields(message)) == [
      (1, 300), (2, b"hi"), (3, bytes(range(8))), (4, bytes(range(4)))]


def test_kernel_kind_and_key():
  assert kernel_trace.kernel_kind("cutlass_80_tensorop") == "gemm"
  assert kernel_trace.kernel_kind("wrapped_transpose") == "transpose"
  assert kernel_trace.kernel_kind("loop_transpose_fusion") == "loop"
  assert kernel_trace.kernel_kind("memset32") == "memset"
  assert kernel_trace.kernel_kind("redzone_checker") == "other"
  assert kernel_trace.kernel_key("loop_add_fusion.3") == "loop_add_fusion_3"
