"""Pre-training end to end through the runner, then fine-tuning from it.

A tiny one-layer model is pre-trained on a tiny corpus over the tiny WikiHop
vocabulary (`pretrain_testing`) and stops after its step-2 checkpoint, as a
killed run leaves it (a real SIGKILL, on two workers:
`multi_worker_test.py`); the same command with more steps resumes from that
checkpoint. The encoder is exported in the released ETC format (heads
dropped), both the training checkpoint and the export initialise a WikiHop
model to the pre-trained weights, and WikiHop fine-tunes from the export.
The pre-trained model has a sentence length table, which fine-tuning has
to be configured to take. One test: every phase builds on the one before,
and each trace of the model costs seconds.
"""

import os

import gin
import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.checkpoints import initialization
from etc_realformer.training import task as task_lib
from tasks import run
from tasks.pretrain import export_encoder
import e2e_testing
import pretrain_testing
import wikihop_testing


def _parse(files, bindings=()):
  run.register_tasks()
  gin.clear_config()
  run.parse_gin(list(files), list(bindings))


def _built_model():
  task = task_lib.task_class()()
  model = task.build_model()
  model(task.dummy_features())
  return model


@pytest.mark.slow
def test_pretrain_resume_export_and_finetune(tmp_path, capsys):
  paths = pretrain_testing.write_data(str(tmp_path / "pt"), num_docs=16)
  # With the sentence length table, which has to travel into fine-tuning.
  gin_file = e2e_testing.write_gin(
      str(tmp_path / "pretrain.gin"),
      pretrain_testing.tiny_gin_lines(paths, 2, num_layers=1) +
      ["etc_config.max_sentence_length_embeddings = 17"])
  model_dir = str(tmp_path / "model")
  try:
    _parse([gin_file])
    assert run.run("train", model_dir)["global_step"] == 2
    assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-2")
    capsys.readouterr()
    # The same command with more steps continues from the checkpoint.
    _parse([gin_file], ["TrainerConfig.train_steps = 3",
                        "TrainerConfig.steps_per_loop = 1"])
    assert run.run("train", model_dir)["global_step"] == 3
    printed = capsys.readouterr().out
    assert "restored from checkpoint: " + os.path.join(model_dir,
                                                        "ckpt-2") in printed
    steps = e2e_testing.progress(printed)
    assert [s for s, _ in steps] == [3] and np.isfinite(steps[0][1])

    # The encoder in the released format, heads dropped.
    out = str(tmp_path / "released")
    prefix = export_encoder.export_encoder(model_dir, out)
    names = [n for n, _ in tf.train.list_variables(prefix)]
    assert names and all(n.startswith("etc_document_bert/") for n in names), (
        names)
    assert {"etc_config.json", "vocab.txt"} <= set(os.listdir(out))
    assert "etc_document_bert/sentence_length_emb_lookup/embedding_table" in (
        names)
    _parse([gin_file])
    pretrained = _built_model()
    tf.train.Checkpoint(model=pretrained).read(
        tf.train.latest_checkpoint(model_dir)).expect_partial()
    reference = {name: v.numpy() for name, v in
                 pretrained.encoder.official_variables().items()}

    # WikiHop takes either checkpoint as init_checkpoint, and fine-tunes.
    wh_dir = str(tmp_path / "wikihop")
    wikihop_testing.write_tiny_wikihop(wh_dir, num_train=4, num_dev=2)
    wikihop_testing.preprocess(wh_dir)
    wh_gin = wikihop_testing.tiny_gin(wh_dir, str(tmp_path / "wh.gin"), **{
        "etc_config.num_hidden_layers": 1,
        "etc_config.max_sentence_length_embeddings": 17,
        "TrainerConfig.train_steps": 2,
        "TrainerConfig.steps_per_loop": 2,
        "TrainerConfig.checkpoint_interval": 2})
    _parse(["tasks/wikihop.gin", wh_gin])
    for source, kind in ((model_dir,
                          initialization.CheckpointKind.TF2_TASK_MODEL),
                         (out, initialization.CheckpointKind.OFFICIAL_TF1)):
      wh_model = _built_model()
      assert initialization.initialize_encoder(wh_model.encoder,
                                               source) == kind
      loaded = wh_model.encoder.official_variables()
      assert loaded.keys() == reference.keys()
      for name, v in loaded.items():
        np.testing.assert_array_equal(v.numpy(), reference[name])
    _parse(["tasks/wikihop.gin", wh_gin],
           [f"TrainerConfig.init_checkpoint = '{out}'",
            f"etc_config.config_file = '{out}/etc_config.json'"])
    assert run.run("train", str(tmp_path / "wh_model"))["global_step"] == 2
  finally:
    gin.clear_config()
