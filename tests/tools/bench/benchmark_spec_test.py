"""Tests for tools/bench/benchmark_spec.py: the spec's JSON round trip, what a
record keeps, variant names from what differs from the defaults, and the
defaults written there against the library's configs."""

import dataclasses

import pytest

from etc_realformer import EtcConfig, ExecutionConfig
from etc_realformer import execution as execution_lib
from tools.bench import benchmark_spec
from tools.bench.benchmark_spec import RunSpec, Spec


def _spec(**execution) -> Spec:
  run = RunSpec(kind="encoder", pass_="fwd_bwd", long_len=4096,
                global_len=256, global_len_mode="256", dtype="mixed_bfloat16")
  etc_config = {"vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 4, "residual_attention": True,
                "grad_checkpointing_period": 0}
  return Spec(run, etc_config, {"att_implementation": "sparse", **execution})


def test_the_axes_defaults_are_execution_configs():
  default = ExecutionConfig()
  for field, axis in benchmark_spec.EXECUTION_AXES.items():
    assert getattr(default, field) == axis.default, field
  assert benchmark_spec.SOFTMAX_DTYPES == execution_lib.SOFTMAX_DTYPES
  assert benchmark_spec.STREAM_DTYPES == execution_lib.STREAM_DTYPES
  assert benchmark_spec.DROPOUT_RNGS == execution_lib.DROPOUT_RNGS
  assert benchmark_spec.ATTENTION_KERNELS == execution_lib.ATTENTION_KERNELS
  assert set(benchmark_spec.ATT_IMPLEMENTATIONS) < set(
      execution_lib.ATT_IMPLEMENTATIONS)


def test_json_round_trip_builds_the_configs():
  spec = _spec(recompute_attention=True, attention_chunk_len=512)
  again = Spec.from_json(spec.to_json())
  assert again == spec
  assert '"pass": "fwd_bwd"' in spec.to_json()
  # What the worker builds from it.
  config = EtcConfig(**again.etc_config)
  assert (config.hidden_size, config.residual_attention) == (64, True)
  execution = ExecutionConfig(**again.execution)
  assert execution.chunk_len_for(4096) == 512
  assert execution.recompute_attention


def test_record_fields_keep_what_controls_the_run():
  fields = _spec().record_fields()
  assert fields["pass"] == "fwd_bwd" and fields["long_len"] == 4096
  assert fields["etc_config"]["hidden_size"] == 64
  assert fields["execution"] == {"att_implementation": "sparse"}
  # No test hooks; no export settings without an export.
  assert not {"fail_for_test", "sleep_for_test", "export_dir", "xla_weights",
              "xla_reference", "pass_"} & set(fields)
  exported = _spec().replace_run(export_dir="/x").record_fields()
  assert exported["export_dir"] == "/x" and exported["xla_weights"] is True


def test_variant_names_say_what_differs_from_the_defaults():
  assert benchmark_spec.variant_name(_spec()) == "sparse-res-bf16-G=256"
  # A default written out is not named.
  assert benchmark_spec.variant_name(_spec(
      softmax_dtype="float32", attention_chunk_len="auto",
      recompute_attention=False)) == "sparse-res-bf16-G=256"
  assert benchmark_spec.variant_name(_spec(
      stream_dtype="compute", attention_chunk_len=0,
      recompute_residual_streams=True)) == (
          "sparse-res-bf16-recstreams-strcompute-chunk0-G=256")
  checkpointed = dataclasses.replace(
      _spec(), etc_config={"residual_attention": False,
                           "grad_checkpointing_period": 2})
  assert benchmark_spec.variant_name(checkpointed.replace_run(xla=True)) == (
      "sparse-nores-bf16-xla-ckpt2-G=256")
  training = Spec(dataclasses.replace(_spec().run, kind="pretrain",
                                      pass_="train_step"),
                  {"residual_attention": True}, {"att_implementation": "auto"})
  assert benchmark_spec.variant_name(training) == "pretrain-res-bf16"


def test_bad_specs_fail_early():
  with pytest.raises(ValueError, match="pass"):
    _spec().replace_run(pass_="backward")
  with pytest.raises(ValueError, match="not swept"):
    Spec(_spec().run, {}, {"no_such_field": 1})
