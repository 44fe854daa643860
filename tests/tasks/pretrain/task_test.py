"""Tests for tasks.pretrain.task: the loss weighting, the metrics, the
per-example outputs (chance and the length-only baseline by hand), the
input pipeline's masks (new per batch, fixed for evaluation, reproducible
given the seed), the settings read from the preprocessing stats, and the
masking and CPC head configs bound in gin."""

import json

import gin
import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.errors import UserInputError
from etc_realformer.training import task as task_lib
from tasks import run
from tasks.pretrain import head
from tasks.pretrain import masking
from tasks.pretrain import task as pretrain_task
import pretrain_testing


def _outputs(batch=2, predictions=3, slots=2, vocab=120):
  """Outputs with all-zero logits: every MLM loss is log(vocab), every CPC
  loss log(present candidates)."""
  return {"mlm_logits": tf.zeros([batch, predictions, vocab]),
          "mlm_predictions": tf.zeros([batch, predictions], tf.int32),
          "cpc_logits": tf.zeros([batch, slots, batch * slots]),
          "cpc_labels": tf.reshape(tf.range(batch * slots), [batch, slots]),
          "cpc_predictions": tf.zeros([batch, slots], tf.int32)}


def _features():
  return {"masked_lm_ids": tf.constant([[0, 5, 0], [7, 7, 0]]),
          "masked_lm_positions": tf.constant([[1, 2, 0], [3, 4, 0]]),
          "masked_lm_weights": tf.constant([[1., 1., 0.], [1., 0., 0.]]),
          "cpc_weights": tf.constant([[1., 1.], [0., 0.]]),
          "cpc_lengths": tf.constant([[3, 5], [0, 0]])}


def test_loss_weighting():
  features, outputs = _features(), _outputs()
  task = pretrain_testing.tiny_task()
  # All-zero CPC logits over 4 slots: log 4 for each present sentence.
  cpc = np.log(4.0)
  mlm = np.log(120.0)
  loss = task.per_example_loss(features, outputs).numpy()
  # Example 1 has no CPC sentence: its CPC term is 0.
  np.testing.assert_allclose(loss, [0.8 * mlm + 0.2 * cpc, 0.8 * mlm],
                             rtol=1e-5)
  only_mlm = pretrain_testing.tiny_task(mlm_weight=1.0, cpc_weight=0.0)
  np.testing.assert_allclose(
      only_mlm.per_example_loss(features, outputs).numpy(), [mlm, mlm],
      rtol=1e-5)
  # Per example, the MLM term is the mean over its predictions: doubling
  # one example's logit of the true id changes that example only.
  logits = np.zeros([2, 3, 120], np.float32)
  logits[0, 1, 5] = 10.0
  sharper = dict(outputs, mlm_logits=tf.constant(logits))
  changed = task.per_example_loss(features, sharper).numpy()
  assert changed[0] < loss[0] and changed[1] == pytest.approx(loss[1])
  with pytest.raises(UserInputError, match="mlm_weight"):
    pretrain_testing.tiny_task(mlm_weight=0.0, cpc_weight=0.0)


def test_metrics_and_prediction_outputs():
  task = pretrain_testing.tiny_task(most_frequent_token_id=7)
  features = _features()
  outputs = _outputs()
  outputs["mlm_predictions"] = tf.constant([[0, 5, 9], [1, 7, 0]])
  outputs["cpc_predictions"] = tf.constant([[0, 3], [2, 3]])
  metrics = task.build_metrics()
  task.update_metrics(metrics, features, outputs)
  results = {m.name: float(m.result()) for m in metrics}
  # MLM: of the 3 weighted predictions (0 and 5 in example 0, 7 in 1)
  # the first two are right.
  assert results["mlm_accuracy"] == pytest.approx(2 / 3)
  assert results["mlm_loss"] == pytest.approx(np.log(120), rel=1e-5)
  # CPC: slot 0 picked itself, slot 1 picked slot 3.
  assert results["cpc_accuracy"] == pytest.approx(0.5)
  assert results["cpc_loss"] == pytest.approx(np.log(4), rel=1e-5)
  out = {k: v.numpy() for k, v in
         task.prediction_outputs(features, outputs).items()}
  # Two present candidates, of lengths 3 and 5: chance 1/2, the
  # length-only baseline picks each query's own length for sure.
  np.testing.assert_allclose(out["cpc_chance"], [0.5, 0.5])
  np.testing.assert_allclose(out["cpc_length_baseline"], [[1, 1], [0, 0]])
  scores = task.official_scores(out, "unused")
  assert scores["mlm_accuracy"] == pytest.approx(2 / 3)
  # Always predicting 7 is right on one of the three.
  assert scores["mlm_most_frequent_baseline"] == pytest.approx(1 / 3)
  assert scores["cpc_accuracy"] == pytest.approx(0.5)
  assert scores["cpc_chance"] == pytest.approx(0.5)
  assert scores["cpc_length_baseline"] == pytest.approx(1.0)
  # Slot 0 picked a candidate of its length (itself), slot 1 an empty slot
  # of another; among the candidates of its own length each is alone.
  np.testing.assert_allclose(out["cpc_same_length_pick"], [[1, 0], [0, 0]])
  np.testing.assert_allclose(out["cpc_correct_within_length"],
                             [[1, 1], [0, 0]])
  assert scores["cpc_same_length_rate"] == pytest.approx(0.5)
  assert scores["cpc_accuracy_within_length"] == pytest.approx(1.0)
  # Equal lengths tie: each query then has a 1/2 chance by length.
  tied = dict(features, cpc_lengths=tf.constant([[4, 4], [0, 0]]))
  out = task.prediction_outputs(tied, outputs)
  np.testing.assert_allclose(out["cpc_length_baseline"], [[.5, .5], [0, 0]])


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
  return pretrain_testing.write_data(str(tmp_path_factory.mktemp("pt")))


def test_settings_from_the_stats_file(tiny_data, tmp_path):
  task = pretrain_testing.tiny_task(
      mask_token_id=None, train_stats_file=tiny_data["stats"])
  with open(tiny_data["stats"]) as f:
    stats = json.load(f)
  assert task.masking.mask_token_id == 14 == stats["vocabulary"][
      "mask_token_id"]
  assert set(task.masking.no_mask_token_ids) == {0, 12, 13, 14}
  assert task.most_frequent_token_id == stats["most_frequent_wordpiece"][
      "id"]
  with pytest.raises(UserInputError, match="mask_token_id"):
    pretrain_testing.tiny_task(mask_token_id=None)
  with pytest.raises(FileNotFoundError, match="stats file not found"):
    pretrain_testing.tiny_task(train_stats_file=str(tmp_path / "no.json"))
  small = pretrain_testing.tiny_config(vocab_size=50)
  with pytest.raises(UserInputError, match="more than etc_config.vocab"):
    pretrain_testing.tiny_task(mask_token_id=None, model_config=small,
                               train_stats_file=tiny_data["stats"])


def _batches(task, mode, n=3):
  ds = task.build_inputs(mode, 4)
  return [{k: v.numpy() for k, v in b.items()} for b in ds.take(n)]


def test_inputs_masked_per_batch_reproducibly(tiny_data):
  def make(seed):
    return pretrain_testing.tiny_task(
        masking_fields=dict(max_predictions_per_seq=12, max_cpc_sentences=2,
                            cpc_max_sentence_len=16),
        train_input=f"{tiny_data['data']}/train-*.tfrecord",
        eval_input=f"{tiny_data['data']}/eval-*.tfrecord",
        train_stats_file=tiny_data["stats"], seed=seed)

  task = make(5)
  first = _batches(task, "train")
  assert set(first[0]) == set(task.model_input_spec())
  for name, spec in task.model_input_spec().items():
    assert list(first[0][name].shape[1:]) == spec.shape[1:].as_list(), name
  # The same seed: the same batches and masks; another seed: other masks.
  again = _batches(make(5), "train")
  for a, b in zip(first, again):
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])
  other = _batches(make(6), "train")
  assert any((a["token_ids"] != b["token_ids"]).any()
             for a, b in zip(first, other))
  # Evaluation: the same masks every time, whatever the training seed.
  ev1, ev2 = _batches(task, "eval", 2), _batches(make(6), "eval", 2)
  for a, b in zip(ev1, ev2):
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])
  # Repeated epochs of a one-example set see new masks: the same stored
  # example masked under batch numbers 0..5.
  stored = pretrain_testing.hand_batch()
  one = {k: tf.constant(v[:1]) for k, v in stored.items()}
  masked = [task.mask(one, tf.constant([5, i], tf.int64))["token_ids"]
            .numpy() for i in range(6)]
  assert len({m.tobytes() for m in masked}) > 1
  assert masking.OUTPUTS.keys() <= first[0].keys()


def test_serve_examples_scores_what_evaluation_scores(tiny_data):
  task = pretrain_testing.tiny_task(
      eval_input=f"{tiny_data['data']}/eval-*.tfrecord",
      train_stats_file=tiny_data["stats"])
  model = task.build_model()
  signatures = task.serving_signatures(model)
  assert sorted(signatures) == ["serve_examples", "serving_default"]
  batch = next(iter(task.build_inputs("eval", 2)))
  files = sorted(tf.io.gfile.glob(f"{tiny_data['data']}/eval-*.tfrecord"))
  examples = [r.numpy() for r in
              tf.data.TFRecordDataset(files).take(2)]
  served = signatures["serve_examples"](examples=tf.constant(examples))
  direct = signatures["serving_default"](
      **{k: batch[k] for k in task.model_input_spec()})
  assert sorted(served) == ["cpc_predictions", "mlm_predictions"]
  for key in served:
    np.testing.assert_array_equal(served[key].numpy(), direct[key].numpy())


def test_gin_binds_the_masking_and_cpc_head_configs_whole():
  run.register_tasks()
  gin.clear_config()
  try:
    run.parse_gin(["tasks/pretrain.gin"], [
        "etc_config.vocab_size = 120",
        "PretrainTask.long_seq_len = 64",
        "PretrainTask.mask_token_id = 14",
        "PretrainTask.no_mask_token_ids = [0, 12]",
        "MaskingConfig.max_predictions_per_seq = 7",
        "MaskingConfig.cpc_negatives = 2",
        "CpcHeadConfig.temperature = 0.3",
        "CpcHeadConfig.projection = 'mlp'"])
    task = task_lib.task_class()()
  finally:
    gin.clear_config()
  assert type(task) is pretrain_task.PretrainTask
  # The gin file's choices and the bindings, with the task's vocabulary
  # facts; cpc_max_sentence_len (64 in the gin file) capped at the long
  # input.
  assert task.masking == masking.MaskingConfig(
      vocab_size=120, mask_token_id=14, no_mask_token_ids=(0, 12),
      masking_rate=0.15, max_predictions_per_seq=7, mask_token_prob=0.8,
      random_token_prob=0.1, cpc_sentence_rate=0.1, max_cpc_sentences=16,
      cpc_max_sentence_len=64, cpc_min_sentence_len=2, cpc_negatives=2)
  assert task.eval_masking.cpc_negatives == 0
  assert task.cpc_head == head.CpcHeadConfig(projection="mlp",
                                             temperature=0.3)


def test_gin_may_not_bind_the_vocabulary_facts_on_the_masking_config():
  run.register_tasks()
  gin.clear_config()
  try:
    with pytest.raises(UserInputError, match="mask_token_id"):
      run.parse_gin(["tasks/pretrain.gin"],
                    ["MaskingConfig.mask_token_id = 3"])
  finally:
    gin.clear_config()


def test_cpc_sentences_capped_at_the_long_input():
  task = pretrain_testing.tiny_task(
      masking_fields=dict(cpc_max_sentence_len=pretrain_testing.LONG + 9))
  assert task.masking.cpc_max_sentence_len == pretrain_testing.LONG
