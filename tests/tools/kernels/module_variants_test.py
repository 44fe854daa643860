"""Tests for tools/kernels/module_variants.py: the cubins an exported module's
custom calls launch, read from the module TensorFlow exports."""

import pytest
import tensorflow as tf

from encoder_testing import probes
from encoder_testing import random_features
from encoder_testing import tiny_config
from encoder_testing import tiny_model
from etc_realformer.attention import dropout as dropout_lib
from etc_realformer.kernels import variants as kernel_variants
from tools.gpu import xla_export
from tools.kernels import build_kernels
from tools.kernels import module_variants

# Three layers (the first emits the sums, the second reads and emits, the
# last reads), RealFormer on every pattern, hash dropout; D = 16, R = 8.
CONFIG = dict(hidden_size=32, num_attention_heads=2, local_radius=4,
              num_hidden_layers=3, intermediate_size=32,
              residual_attention=True, attention_probs_dropout_prob=0.2)


def _export(directory, **execution):
  model = tiny_model(tiny_config(**CONFIG), attention_kernel="fused",
                     dropout_rng="hash", **execution)
  feats = {k: tf.constant(v) for k, v in random_features(
      model.config, batch=1, long_len=16, global_len=4).items()}
  probe = tf.constant(probes(model.config, 1, 16, 4)[0])

  @tf.function(jit_compile=True)
  def step(f):
    with tf.GradientTape() as tape:
      long_out, global_out = model(f, att_implementation="sparse",
                                   training=True)
      # Both outputs: the last layer's global branch has a backward too.
      loss = tf.reduce_sum(long_out * probe) + tf.reduce_sum(global_out)
    return tape.gradient(loss, model.trainable_variables)

  xla_export.write_module(tf, step, feats, model.variables,
                          {"export_dir": str(directory),
                           "xla_reference": False})
  return str(directory)


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
  root = tmp_path_factory.mktemp("modules")
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(dropout_lib, "new_call_seed",
                  lambda: tf.constant([3, 7], tf.int32))
    return {"summed": _export(root / "summed"),
            # Deeper: a folder's modules are found anywhere under it.
            "recomputed": _export(root / "more" / "recomputed",
                                  recompute_residual_streams=True),
            "root": str(root)}


def _names(module_dir):
  return [v.name for v in module_variants.module_variants(module_dir)]


def _write(cubins, name):
  """A stand-in build's cubin and its metadata."""
  (cubins / f"{name}.cubin").write_bytes(b"")
  (cubins / f"{name}.meta").write_text("f 0 4 32\n")


def test_summed_streams_launch_each_layers_flags(modules):
  names = _names(modules["summed"])
  forward = sorted(n for n in names if n.startswith("branch_forward"))
  # The global branch's long keys, L = 16, are a multiple of 16 (the long
  # branch's 20 padded rows, its block of 5 and G = 4 are not): its cubins
  # are aligned for them.
  assert forward == sorted(
      f"branch_forward_float32_d16_r8_{branch}_f32_{flags}_drop_rows{aligned}"
      for branch, aligned in (("band", ""), ("dense", "_a0010"))
      for flags in ("0011", "1111", "1100"))
  # The backward: per branch and layer its queries kernel and the keys
  # kernel of each pattern, with that pattern's READ and WRITE flags.
  assert "branch_backward_queries_float32_d16_r8_band_f32_1111_drop_rows" in names
  assert ("branch_backward_keys_float32_d16_r8_dense_p2_f32_01_drop_rows_a010"
          in names)
  assert "branch_backward_keys_float32_d16_r8_dense_p1_f32_10_drop_rows" in names
  assert "branch_backward_keys_float32_d16_r8_band_p1_f32_10_drop_rows" in names
  assert len(names) == 6 + 6 * 3


def test_recomputed_streams_read_from_the_sources(modules):
  names = _names(modules["recomputed"])
  assert "branch_forward_float32_d16_r8_band_f32_0000_drop_rows" in names
  assert "branch_forward_float32_d16_r8_dense_f32_ss00_drop_rows_a0010" in names
  assert "branch_backward_keys_float32_d16_r8_band_p2_f32_s0_drop_rows" in names
  assert not any("1" in n.split("_f32_")[1].split("_")[0] for n in names)


def test_the_default_build_covers_a_small_models_calls(modules):
  # Their plain cubins: a handler launches them where the aligned ones
  # are not built.
  built = {v.name for v in kernel_variants.default_variants(
      ["float32"], [16], [8])}
  for kind in ("summed", "recomputed"):
    assert {v.plain.name for v in module_variants.module_variants(
        modules[kind])} <= built


def test_cli_names_what_a_build_lacks(modules, tmp_path, capsys):
  cubins = tmp_path / "cubins"
  cubins.mkdir()
  names = _names(modules["summed"])
  for name in set(names[1:] + _names(modules["recomputed"])):
    _write(cubins, name)
  # A folder of modules: each one's calls, the deeper one's too.
  assert module_variants.main([f"--modules={modules['root']}",
                               f"--cubins={cubins}"]) == 1
  out = capsys.readouterr().out
  assert f"  {names[0]}  MISSING" in out and out.count("MISSING") == 1
  assert f"{modules['recomputed']}: " in out
  assert "1 missing from" in out
  _write(cubins, names[0])
  assert module_variants.main([f"--modules={modules['summed']}",
                               f"--cubins={cubins}"]) == 0
  assert "0 missing" in capsys.readouterr().out


def test_an_aligned_variant_is_there_when_its_plain_one_is(tmp_path):
  # A handler falls back to the plain cubin: a build lacks an aligned
  # variant only when it has neither.
  variant = kernel_variants.Variant("bfloat16", 64, 32, True, "1111",
                                    aligned="0010")
  assert module_variants.missing([variant], str(tmp_path)) == [variant.name]
  _write(tmp_path, variant.plain.name)
  assert module_variants.missing([variant], str(tmp_path)) == []


def test_a_folder_without_modules_is_one_line(tmp_path, capsys):
  assert module_variants.main([f"--modules={tmp_path}"]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "no exported module" in err


def test_parses_a_call_line():
  line = (
      '%0 = stablehlo.custom_call @etc_branch_backward(%a, %b) {api_version = '
      '4 : i32, backend_config = {band = false, by_rows = true, emit1 = '
      'true, emit2 = false, has_ids = false, keep_threshold = 0 : i64, '
      'read_prev1 = false, read_prev2 = true, sources = 0 : i64, '
      'block_len = 1 : i64}} : ('
      + ", ".join(["tensor<1x2x16x32xbf16>"] +
                  ["tensor<1x2x16x32xbf16>"] * 2 +
                  ["tensor<1x2x8x32xbf16>"] * 2 +
                  ["tensor<1x16x1x2xf32>"] + ["tensor<1xf32>"] * 3 +
                  ["tensor<1xf32>", "tensor<1x2x8x8xbf16>"] +
                  ["tensor<1xf32>"] * 7 + ["tensor<1x2x8x8xbf16>",
                                           "tensor<1xf32>"]) +
      ') -> tuple<tensor<1x2x8x32xbf16>>')
  (call,) = module_variants.parse_calls(line)
  assert call.attributes["read_prev2"] == "true"
  names = [v.name for v in module_variants.call_variants(call)]
  # The sums are the inputs' dtype: "low"; no ids; dense; dropout off;
  # aligned for the rows and the first pattern's keys (16; the second
  # pattern's 8 and the block length 1 are not multiples of 16).
  assert names == [
      "branch_backward_queries_bfloat16_d32_noids_dense_low_0110_nodrop_rows"
      "_a1100",
      "branch_backward_keys_bfloat16_d32_noids_dense_p1_low_01_nodrop_rows"
      "_a110",
      "branch_backward_keys_bfloat16_d32_noids_dense_p2_low_10_nodrop_rows"
      "_a100"]


def test_build_kernels_reads_the_modules_in_a_child_process(modules):
  # `build_kernels --modules`: the same variants, read where Triton is not.
  variants = build_kernels.modules_variants([modules["summed"]])
  assert [v.name for v in variants] == _names(modules["summed"])
  with pytest.raises(ValueError, match="missing: no such folder"):
    build_kernels.modules_variants([modules["root"] + "/missing"])
