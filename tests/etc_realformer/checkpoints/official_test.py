"""Loading released-format checkpoints: every option, and strict checking."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from conftest import GOLDEN_DIR
from encoder_testing import max_abs_diff, random_features, tiny_config
from etc_realformer import EtcConfig, EtcModel, load_official_checkpoint
from etc_realformer.checkpoints.official import CheckpointMismatchError
from etc_realformer.checkpoints.official import is_official_checkpoint
from etc_realformer.checkpoints.official import save_official_checkpoint


def _sharing_combinations():
  combos = []
  for qkv, kv, out, ff in itertools.product([True, False], repeat=4):
    if qkv and kv:
      continue  # share_kv is ignored when qkv is shared: same model
    combos.append(dict(share_qkv_projections=qkv, share_kv_projections=kv,
                       share_att_output_projection=out,
                       share_feed_forward_params=ff))
  return combos


OPTIONS = _sharing_combinations() + [
    dict(use_pre_activation_order=True),
    dict(att_size_per_head=6),
    dict(embedding_size=8),
    dict(max_absolute_position_embeddings=32),
    dict(max_sentence_length_embeddings=4),
    dict(use_hard_g2l_mask=True, use_hard_l2g_mask=True),
    dict(relative_vocab_size=None, relative_pos_max_distance=0),
]


@pytest.mark.parametrize("options", OPTIONS,
                         ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_every_option_saves_and_loads(tmp_path, options):
  config = tiny_config(num_hidden_layers=1, **options)
  source = EtcModel(config)
  source.build()
  prefix = save_official_checkpoint(source, str(tmp_path / "model.ckpt"))
  names = {n for n, _ in tf.train.list_variables(prefix)}
  # The names that each option decides.
  fused = ("etc_document_bert/global_local_transformer_layers/fused_att_layer_0"
           "/fused_global_local_att/")
  assert (fused + "global_query_projection/linear/kernel" in names) == (
      not config.share_qkv_projections)
  assert (fused + "l2g_key_projection/linear/kernel" in names) == (
      not config.share_qkv_projections and not config.share_kv_projections)
  assert (fused + "global_output_projection/kernel" in names) == (
      not config.share_att_output_projection)
  assert any("long_feed_forward_layer_0" in n for n in names) == (
      not config.share_feed_forward_params)
  assert ("etc_document_bert/token_emb_lookup/projection/kernel" in names) == (
      config.embedding_size is not None)
  assert any("position_emb_lookup_long" in n for n in names) == bool(
      config.max_absolute_position_embeddings)
  assert ("etc_document_bert/sentence_length_emb_lookup/embedding_table"
          in names) == bool(config.max_sentence_length_embeddings)

  target = EtcModel(config)
  report = load_official_checkpoint(target, prefix)
  assert len(report.loaded) == len(names)
  feats = random_features(config, batch=2, long_len=9, global_len=3,
                          with_relative_ids=config.relative_vocab_size
                          is not None)
  for impl in ("full", "sparse"):
    a = source(feats, att_implementation=impl)
    b = target(feats, att_implementation=impl)
    assert max_abs_diff(a[0], b[0]) == 0.0 and max_abs_diff(a[1], b[1]) == 0.0


def test_mismatch_lists_every_problem_and_loads_nothing():
  golden = EtcConfig.from_json_file(str(GOLDEN_DIR / "etc_config.json"))
  # Wrong sharing (unshared qkv), wrong width of the feed-forward.
  config = golden.replace(share_qkv_projections=False, intermediate_size=48)
  model = EtcModel(config)
  model.build()
  before = {k: v.numpy().copy() for k, v in model.official_variables().items()}
  with pytest.raises(CheckpointMismatchError) as info:
    load_official_checkpoint(model, str(GOLDEN_DIR / "model.ckpt"))
  message = str(info.value)
  assert "missing from the checkpoint" in message
  assert "global_query_projection/linear/kernel" in message
  assert "g2l_value_projection/linear/bias" in message
  assert "mis-shaped" in message
  assert "dense_layers/layer_0/kernel: checkpoint [32, 64] vs model [32, 48]" in message
  assert "share_qkv_projections" in message  # the hint
  for name, var in model.official_variables().items():
    assert np.array_equal(var.numpy(), before[name]), name


def test_unexpected_variables_are_errors_and_slots_are_skipped(tmp_path):
  config = tiny_config(num_hidden_layers=1)
  source = EtcModel(config)
  source.build()
  prefix = str(tmp_path / "model.ckpt")
  names = {k: v for k, v in source.official_variables().items()}
  extra = {
      "global_step": tf.constant(7, tf.int64),
      "etc_document_bert/long_emb_layer_norm/gamma/adam_m": tf.zeros([16]),
      "cls/predictions/output_bias": tf.zeros([50]),  # pre-training head
  }
  all_vars = {**{n: tf.convert_to_tensor(v) for n, v in names.items()},
              **extra}
  order = sorted(all_vars)
  tf.raw_ops.SaveV2(prefix=prefix, tensor_names=order,
                    shape_and_slices=[""] * len(order),
                    tensors=[all_vars[n] for n in order])
  report = load_official_checkpoint(EtcModel(config), prefix)
  assert report.skipped == ["etc_document_bert/long_emb_layer_norm/gamma/adam_m",
                            "global_step"]
  assert report.ignored == ["cls/predictions/output_bias"]

  smaller = EtcModel(config.replace(num_hidden_layers=0 + 1,
                                    share_att_output_projection=True))
  with pytest.raises(CheckpointMismatchError, match="unexpected in the checkpoint"):
    load_official_checkpoint(smaller, prefix)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="no checkpoint"):
    load_official_checkpoint(EtcModel(tiny_config()), str(tmp_path))


def test_variable_names_match_released_list():
  config = EtcConfig.from_json_file(str(GOLDEN_DIR / "etc_config.json"))
  model = EtcModel(config)
  listed = {}
  for line in (GOLDEN_DIR / "variables.txt").read_text().splitlines():
    name, shape = line.split("\t")
    listed[name] = [int(d) for d in shape.strip("[]").split(",") if d.strip()]
  ours = {k: v.shape.as_list() for k, v in model.official_variables().items()}
  assert ours == listed


def test_loads_from_directory_and_index_path():
  config = EtcConfig.from_json_file(str(GOLDEN_DIR / "etc_config.json"))
  for path in (GOLDEN_DIR, GOLDEN_DIR / "model.ckpt.index"):
    report = load_official_checkpoint(EtcModel(config), str(path))
    assert len(report.loaded) == 54
  assert is_official_checkpoint(str(GOLDEN_DIR))


def test_absolute_position_tables_sit_at_the_checkpoint_root(tmp_path):
  # As the original ETC writes them: outside `etc_document_bert/`.
  config = tiny_config(num_hidden_layers=1,
                       max_absolute_position_embeddings=16)
  source = EtcModel(config)
  source.build()
  prefix = save_official_checkpoint(source, str(tmp_path / "model.ckpt"))
  names = {n for n, _ in tf.train.list_variables(prefix)}
  assert "position_emb_lookup_long/embedding_table" in names
  assert "position_emb_lookup_global/embedding_table" in names
  assert not any(n.startswith("etc_document_bert/position_emb_lookup")
                 for n in names)
  # A checkpoint written with the tables under the encoder scope (as this
  # project once did) is not the released layout: refused, named.
  moved = {("etc_document_bert/" + n if n.startswith("position_emb") else n):
           tf.train.load_variable(prefix, n) for n in names}
  wrong = str(tmp_path / "wrong.ckpt")
  order = sorted(moved)
  tf.raw_ops.SaveV2(prefix=wrong, tensor_names=order,
                    shape_and_slices=[""] * len(order),
                    tensors=[tf.constant(moved[n]) for n in order])
  with pytest.raises(CheckpointMismatchError,
                     match="etc_document_bert/position_emb_lookup_long"):
    load_official_checkpoint(EtcModel(config), wrong)
