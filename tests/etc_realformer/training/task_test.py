"""The Task spine: registry, gin glue, the TFRecord input pipeline, side
inputs by source, the base serving signatures and official scoring."""

import gin
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from encoder_testing import tiny_config
from etc_realformer import ExecutionConfig
from etc_realformer.data import tfrecords
from etc_realformer.errors import UserInputError
from etc_realformer.training import experiment
from etc_realformer.training import task as task_lib

L, G = 12, 3


class _Head(task_lib.EtcTaskModel):

  def __init__(self, encoder, side_inputs_fn):
    super().__init__(encoder, side_inputs_fn)
    self.score = tf_keras.layers.Dense(1)

  def head(self, features, long_output, global_output, training=None):
    return {"logits": tf.squeeze(self.score(global_output), -1)}


@task_lib.register_task("spine_test_task")
class SpineTestTask(task_lib.Task):
  """One label per example over G global tokens; breakpoint side inputs."""

  side_input_source = "breakpoints"

  def feature_spec(self):
    return {"token_ids": (tf.int32, (L,)),
            "global_token_ids": (tf.int32, (G,)),
            "long_breakpoints": (tf.int32, (L,)),
            "global_breakpoints": (tf.int32, (G,)),
            "sentence_ids": (tf.int32, (L,)),
            "label": (tf.int32, ()),
            "example_id": (tf.string, ())}

  def build_model(self):
    return _Head(self.build_encoder(), self.side_inputs)

  def per_example_loss(self, features, outputs):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=features["label"], logits=outputs["logits"])


def _example(i):
  return {"token_ids": np.arange(L) % 7 + 1,
          "global_token_ids": np.ones(G, np.int32),
          "long_breakpoints": np.eye(L, dtype=np.int32)[L - 1],
          "global_breakpoints": np.eye(G, dtype=np.int32)[G - 1],
          "sentence_ids": np.minimum(np.arange(L) // 4, G - 1),
          "label": i % G, "example_id": f"ex{i}"}


@pytest.fixture
def task(tmp_path):
  spec = SpineTestTask(model_config=tiny_config(),
                       execution=ExecutionConfig()).feature_spec()
  path = str(tmp_path / "data.tfrecord")
  tfrecords.write_tfrecord(path, (tfrecords.to_tf_example(_example(i), spec)
                                  for i in range(5)))
  return SpineTestTask(model_config=tiny_config(),
                       execution=ExecutionConfig(), long_seq_len=L,
                       global_seq_len=G, train_input=path, eval_input=path,
                       seed=1)


def test_registry_and_gin():
  assert task_lib.get_task_class("spine_test_task").name == "spine_test_task"
  assert "spine_test_task" in task_lib.registered_tasks()
  with pytest.raises(ValueError, match="unknown task"):
    task_lib.get_task_class("no_such_task")
  with pytest.raises(ValueError, match="taken"):
    @task_lib.register_task("spine_test_task")
    class Other(SpineTestTask):  # pylint: disable=unused-variable
      pass
  gin.clear_config()
  try:
    gin.parse_config([
        "task_class.cls = @SpineTestTask",
        "SpineTestTask.long_seq_len = 99",
        "etc_config.vocab_size = 40",
        "execution_config.attention_chunk_len = 3"])
    built = task_lib.task_class()()
    assert isinstance(built, SpineTestTask) and built.long_seq_len == 99
    assert built.model_config.vocab_size == 40
    assert built.execution.attention_chunk_len == 3
  finally:
    gin.clear_config()


def test_input_pipeline_eval_and_train(task):
  batches = list(task.build_inputs("eval", 2))
  assert [int(b["label"].shape[0]) for b in batches] == [2, 2, 1]
  assert batches[0]["example_id"].numpy().tolist() == [b"ex0", b"ex1"]
  assert batches[0]["token_ids"].dtype == tf.int32
  train = next(iter(task.build_inputs("train", 4)))
  assert train["token_ids"].shape == (4, L)  # repeats, drops the remainder
  with pytest.raises(ValueError, match="mode"):
    task.build_inputs("test", 2)


def test_missing_inputs_name_the_mode_and_pattern(task, tmp_path):
  task.input_patterns["predict"] = None
  with pytest.raises(ValueError, match="predict_input"):
    task.input_files("predict")
  task.input_patterns["predict"] = str(tmp_path / "none*.tfrecord")
  with pytest.raises(FileNotFoundError, match="predict_input: .*none"):
    task.input_files("predict")


def test_tfrecords_of_other_lengths_are_refused_when_opened(task, tmp_path):
  spec = task.feature_spec()
  short = dict(spec, token_ids=(tf.int32, (L - 4,)))
  path = str(tmp_path / "short.tfrecord")
  tfrecords.write_tfrecord(path, [tfrecords.to_tf_example(
      dict(_example(0), token_ids=np.ones(L - 4)), short)])
  task.input_patterns["eval"] = path
  with pytest.raises(UserInputError, match=(
      rf"short\.tfrecord: record 0, feature 'token_ids' has {L - 4} values "
      rf"where the reader expects {L} .*long_seq_len = {L}")):
    task.build_inputs("eval", 2)


def test_side_inputs_by_source_and_in_the_pipeline(task):
  batch = next(iter(task.build_inputs("eval", 2)))
  side = task.side_inputs(batch)
  assert side["l2l_att_mask"].shape == (2, L, 2 * 2 + 1)
  task.side_inputs_in_pipeline = True
  batch = next(iter(task.build_inputs("eval", 2)))
  assert "g2l_relative_att_ids" in batch
  model = task.build_model()
  outputs = model({k: v for k, v in batch.items() if v.dtype != tf.string})
  assert outputs["logits"].shape == (2, G)


def test_base_serving_signatures(task):
  model = task.build_model()
  model(task.dummy_features(), training=False)
  signatures = task.serving_signatures(model)
  assert sorted(signatures) == ["serve_examples", "serving_default"]
  spec = task.feature_spec()
  examples = tf.constant([tfrecords.to_tf_example(_example(i), spec)
                          .SerializeToString() for i in range(2)])
  from_examples = signatures["serve_examples"](examples=examples)
  batch = next(iter(task.build_inputs("eval", 2)))
  direct = signatures["serving_default"](
      **{k: batch[k] for k in task.model_features()})
  np.testing.assert_allclose(from_examples["logits"], direct["logits"],
                             rtol=1e-6)


def test_official_eval_skips_tasks_without_an_official_metric(task, tmp_path):
  model = task.build_model()
  model(task.dummy_features(), training=False)
  assert experiment.official_eval(task, model, tf.distribute.get_strategy(),
                                  2, str(tmp_path / "out")) is None


def test_official_eval_predicts_writes_and_scores(task, tmp_path):
  class Scored(SpineTestTask):

    def prediction_outputs(self, features, outputs):
      return {"example_id": features["example_id"], "label": features["label"],
              "prediction": tf.argmax(outputs["logits"], -1,
                                      output_type=tf.int32)}

    def write_predictions(self, predictions, output_dir):
      path = f"{output_dir}/predictions.txt"
      with open(path, "w") as f:
        f.write("\n".join(p.decode() for p in predictions["example_id"]))
      return path

    def official_scores(self, predictions, output_dir):
      return {"accuracy": float(np.mean(predictions["prediction"] ==
                                        predictions["label"])),
              "count": len(predictions["label"])}

  scored = Scored(model_config=task.model_config, execution=task.execution,
                  long_seq_len=L, global_seq_len=G,
                  eval_input=task.input_patterns["eval"])
  model = scored.build_model()
  model(scored.dummy_features(), training=False)
  out_dir = str(tmp_path / "out")
  result = experiment.official_eval(scored, model,
                                    tf.distribute.get_strategy(), 2, out_dir)
  assert result["count"] == 5 and 0.0 <= result["accuracy"] <= 1.0
  with open(f"{out_dir}/predictions.txt") as f:
    assert f.read().split() == [f"ex{i}" for i in range(5)]


@pytest.mark.parametrize("setting,value", [
    ("long_seq_len", "4096"), ("global_seq_len", 0),
    ("shuffle_buffer_size", -1), ("seed", "7")])
def test_task_settings_are_checked_where_they_enter(setting, value):
  with pytest.raises(UserInputError, match=f"SpineTestTask.{setting}: must "
                     f"be .*, got {value!r}"):
    SpineTestTask(model_config=tiny_config(), execution=ExecutionConfig(),
                  **{setting: value})
