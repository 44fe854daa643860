"""Tests of `tools.analysis.cpc_context`: the context permutation, the probe's
figures against a hand computation, the sensitivity it is meant to show,
and the command line on a tiny run directory."""

import json
import os

import gin
import numpy as np
import pytest
import tensorflow as tf

import cli_testing
import pretrain_testing
from tasks import run
from tools.analysis import cpc_context


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  return pretrain_testing.write_data(str(tmp_path_factory.mktemp("cpc")))


def _task(paths, **kwargs):
  # The training split, read as evaluation data: more CPC sentences.
  return pretrain_testing.tiny_task(
      masking_fields=dict(max_cpc_sentences=2, cpc_max_sentence_len=16,
                          cpc_sentence_rate=0.3),
      eval_input=f"{paths['data']}/train-*.tfrecord", **kwargs)


def _batch(task, size=8):
  return dict(next(iter(task.build_inputs("eval", size))))


def test_permutation_moves_context_pieces_only(data):
  task = _task(data)
  features = _batch(task)
  where = cpc_context.context_mask(features)
  tokens = features["token_ids"].numpy()
  permuted = cpc_context.permute_context(features, 3)["token_ids"].numpy()
  # CPC sentences (all [MASK]) and padding stay; the context's pieces are
  # the same multiset, moved.
  np.testing.assert_array_equal(permuted[~where], tokens[~where])
  assert sorted(permuted[where]) == sorted(tokens[where])
  assert (permuted[where] != tokens[where]).mean() > 0.5
  # Every CPC sentence's pieces are outside the context.
  sentence_ids = features["sentence_ids"].numpy()
  positions = features["cpc_global_positions"].numpy()
  for b, c in zip(*np.nonzero(features["cpc_weights"].numpy() > 0)):
    assert not where[b][sentence_ids[b] == positions[b, c]].any()


def test_probe_by_hand_and_its_sensitivity(data):
  task = _task(data)
  features = _batch(task)
  model = task.build_model()
  result = cpc_context.probe(model, [features], seed=5)
  _, g = model.encode(features, training=False)
  _, g2 = model.encode(cpc_context.permute_context(features, 5),
                       training=False)
  w = features["cpc_weights"].numpy() > 0
  positions = features["cpc_global_positions"].numpy()
  q = np.stack([g[b, positions[b, c]] for b, c in zip(*np.nonzero(w))])
  q2 = np.stack([g2[b, positions[b, c]] for b, c in zip(*np.nonzero(w))])
  lengths = features["cpc_lengths"].numpy()[w]
  assert result["queries"] == len(q) > 2
  assert result["context_shift"] == pytest.approx(
      np.linalg.norm(q - q2, axis=-1).mean(), rel=1e-5)
  same = [np.linalg.norm(q[a] - q[b]) for a in range(len(q))
          for b in range(len(q)) if a != b and lengths[a] == lengths[b]]
  assert same, lengths
  assert result["same_length_spread"] == pytest.approx(np.mean(same),
                                                       rel=1e-5)
  assert result["context_share"] == pytest.approx(
      result["context_shift"] / result["same_length_spread"])
  # Identity value/output projections let the context through at
  # initialisation; the default small weights barely do.
  open_task = _task(data, model_config=pretrain_testing.tiny_config(
      value_output_identity_init=1.0))
  opened = cpc_context.probe(open_task.build_model(), [features], seed=5)
  assert opened["context_shift"] > 10 * result["context_shift"]


@pytest.mark.slow
def test_command_line(data, tmp_path):
  model_dir = tmp_path / "run"
  model_dir.mkdir()
  gin.clear_config()
  try:
    run.register_tasks()
    run.parse_gin([], pretrain_testing.tiny_gin_lines(data, 2))
    config = gin.config_str()
    from etc_realformer.training import task as task_lib
    task = task_lib.task_class()()
    model = task.build_model()
    model(task.dummy_features(), training=False)
    tf.train.Checkpoint(model=model).save(str(model_dir / "ckpt"))
  finally:
    gin.clear_config()
  (model_dir / "operative_config.gin").write_text(config)
  output = tmp_path / "probe.json"
  stdout = cli_testing.output_here("tools.analysis.cpc_context", [
      f"--model_dir={model_dir}", f"--checkpoint={model_dir}/ckpt-1",
      f"--output={output}"])
  line = [s for s in stdout.splitlines() if s.startswith("cpc_context | ")]
  printed = json.loads(line[0].split(" | ", 1)[1])
  assert printed == json.loads(output.read_text())
  assert printed["queries"] > 0 and printed["context_shift"] >= 0
  cli_testing.user_error_line("tools.analysis.cpc_context",
                              [f"--model_dir={tmp_path}/missing"],
                              "operative_config.gin")
  assert not os.path.exists(tmp_path / "missing")
  # Files that hold no example: one line naming the pattern, not an
  # IndexError.
  empty = str(tmp_path / "empty.tfrecord")
  tf.io.TFRecordWriter(empty).close()
  cli_testing.user_error_line_here(
      "tools.analysis.cpc_context",
      [f"--model_dir={model_dir}", f"--input={empty}"],
      f"{empty}: no examples")
