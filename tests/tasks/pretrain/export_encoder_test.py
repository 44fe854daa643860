"""Tests for tasks.pretrain.export_encoder: a training run's encoder written
in the released format (heads dropped, values restored, config and
vocabulary beside it), and the command line's mistakes."""

import json
import os

from absl import flags
import gin
import numpy as np
import pytest
import tensorflow as tf

import e2e_testing
from etc_realformer.checkpoints import official
from etc_realformer.config import EtcConfig
from etc_realformer.errors import UserInputError
from etc_realformer.training import task as task_lib
from tasks import run
from tasks.pretrain import export_encoder
import pretrain_testing
import wikihop_testing


@pytest.fixture
def model_dir(tmp_path):
  """A one-layer pre-training run's directory: its operative config and one
  checkpoint of a freshly built model (no training needed)."""
  wikihop_testing.write_tiny_wikihop(str(tmp_path / "vocab"), 1, 1)
  lines = pretrain_testing.tiny_gin_lines(
      {"data": str(tmp_path), "stats": "",
       "vocab": str(tmp_path / "vocab" / "vocab.txt")}, 1, num_layers=1)
  # [MASK] given directly: there are no preprocessing stats.
  lines = [l for l in lines if "train_stats_file" not in l] + [
      "PretrainTask.mask_token_id = 14"]
  path = tmp_path / "model"
  os.makedirs(path)
  e2e_testing.write_gin(str(path / "operative_config.gin"), lines)
  try:
    run.register_tasks()
    gin.clear_config()
    run.parse_gin([str(path / "operative_config.gin")], [])
    task = task_lib.task_class()()
    model = task.build_model()
    model(task.dummy_features(), training=False)
    tf.train.Checkpoint(model=model).save(str(path / "ckpt"))
    yield str(path), model
  finally:
    gin.clear_config()


def _flags(monkeypatch, argv):
  """Gives `main` its own parsed flags (those of the binary)."""
  values = flags.FlagValues()
  for name in ("model_dir", "output_dir", "checkpoint"):
    flags.DEFINE_string(name, None, "", flag_values=values)
  flags.DEFINE_multi_string("gin_file", [], "", flag_values=values)
  flags.DEFINE_multi_string("gin_bindings", [], "", flag_values=values)
  values(["export_encoder", *argv])
  monkeypatch.setattr(flags, "FLAGS", values)


def test_writes_the_encoder_config_and_vocabulary(model_dir, tmp_path,
                                                  monkeypatch, capsys):
  path, model = model_dir
  out = tmp_path / "released"
  _flags(monkeypatch, [f"--model_dir={path}", f"--output_dir={out}",
                       f"--checkpoint={path}/ckpt-1"])
  export_encoder.main(["export_encoder"])
  prefix = str(out / export_encoder.CHECKPOINT_PREFIX)
  assert capsys.readouterr().out == f"export_encoder | {prefix}\n"
  reader = tf.train.load_checkpoint(prefix)
  names = set(reader.get_variable_to_shape_map())
  # The encoder only, every variable with the trained values; no heads.
  expected = official.checkpoint_names(model.encoder)
  assert names == set(expected)
  assert all(n.startswith("etc_document_bert/") for n in names)
  for name, var in expected.items():
    np.testing.assert_array_equal(reader.get_tensor(name), var.numpy(),
                                  err_msg=name)
  config = EtcConfig.from_json_file(str(out / export_encoder.CONFIG_FILE))
  assert config == model.encoder.config
  assert json.loads((out / export_encoder.CONFIG_FILE).read_text())[
      "num_hidden_layers"] == 1
  assert (out / "vocab.txt").read_text().startswith("[PAD]\n")


def test_a_directory_without_a_run_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match=r"operative_config\.gin: not "
                     "found; --model_dir must be a training run's"):
    export_encoder.export_encoder(str(tmp_path), str(tmp_path / "out"))


@pytest.mark.parametrize("argv,args,message", [
    ([], ["export_encoder", "extra"], r"unexpected arguments: \['extra'\]"),
    ([], ["export_encoder"], "--model_dir, --output_dir required"),
    (["--model_dir=m"], ["export_encoder"], "^--output_dir required"),
])
def test_command_line_mistakes(monkeypatch, argv, args, message):
  _flags(monkeypatch, argv)
  with pytest.raises(UserInputError, match=message):
    export_encoder.main(args)
