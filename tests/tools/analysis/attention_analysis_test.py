"""`python -m tools.analysis.attention_analysis`: checkpoints of each kind and a
task's feature TFRecords in, per (branch, layer, head) statistics as JSON and
violin plots out."""

import json
import math
import os

import pytest
import tensorflow as tf

import cli_testing
import wikihop_testing
from etc_realformer import EtcConfig, EtcModel, cli
from etc_realformer.checkpoints.official import save_official_checkpoint
from etc_realformer.data import tfrecords
from etc_realformer.errors import UserInputError
from tasks.wikihop import features as wikihop_features
from tools.analysis import attention_analysis

L, G = wikihop_testing.L, wikihop_testing.G
# The two hand-made WikiHop records: real long and global tokens (the rest is
# padding); the data holds them as records 0, 1, 0.
LONG_TOKENS, GLOBAL_TOKENS = (8, 7), (6, 5)
RECORDS = (0, 1, 0)


def _config(residual: bool) -> EtcConfig:
  return EtcConfig(vocab_size=50, hidden_size=16, num_hidden_layers=3,
                   num_attention_heads=2, intermediate_size=32,
                   local_radius=4, relative_pos_max_distance=2,
                   relative_vocab_size=8, residual_attention=residual)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  """A task-model checkpoint as the trainer writes it (its config passed
  with --config), the same weights in the released layout with residual
  attention off and etc_config.json beside it, and three WikiHop records."""
  root = tmp_path_factory.mktemp("attention")
  encoder = EtcModel(_config(True))
  encoder.build()
  manager = tf.train.CheckpointManager(
      tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=encoder)),
      str(root / "trained"), max_to_keep=1)
  manager.save()
  _config(True).to_json_file(str(root / "realformer.json"))
  released = root / "released"
  save_official_checkpoint(encoder, str(released / "model.ckpt"))
  _config(False).to_json_file(str(released / "etc_config.json"))
  features = wikihop_testing.two_records()
  spec = {k: (tf.int32, (features[k].shape[1],))
          for k in wikihop_features.MODEL_FEATURES}
  tfrecords.write_tfrecord(str(root / "dev.tfrecord"), [
      tfrecords.to_tf_example({k: features[k][i] for k in spec}, spec)
      for i in RECORDS])
  return root


def _check_report(report, labels):
  assert [c["label"] for c in report["checkpoints"]] == labels
  assert report["data"]["side_input_source"] == "multihop"
  for entry in report["checkpoints"]:
    assert entry["examples"] == len(RECORDS)
    for name, tokens, length, max_keys in (
        ("long", LONG_TOKENS, L, 9 + G), ("global", GLOBAL_TOKENS, G, G + L)):
      branch = entry["branches"][name]
      rows = sum(tokens[i] for i in RECORDS)
      assert branch["rows"] == rows
      assert branch["padding_rows"] == len(RECORDS) * length - rows
      assert branch["fully_masked_rows"] == 0
      assert len(branch["entropy"]) == 3 and len(branch["jsd"]) == 2
      for layer in branch["entropy"] + branch["jsd"]:
        assert [h["head"] for h in layer["heads"]] == [0, 1]
        for head in layer["heads"]:
          assert head["count"] == rows
          assert head["q1"] <= head["median"] <= head["q3"]
      upper = math.log(branch["keys"]["max"])
      assert branch["keys"]["max"] <= max_keys
      for layer in branch["entropy"]:
        for head in layer["heads"]:
          assert -1e-6 <= head["min"] <= head["max"] <= upper + 1e-5
      for layer in branch["jsd"]:
        for head in layer["heads"]:
          assert 0 <= head["min"] <= head["max"] <= math.log(2) + 1e-6


def test_one_checkpoint_writes_every_branch_layer_and_head(workdir, tmp_path):
  report = attention_analysis.run_analysis(
      [str(workdir / "trained")], str(workdir / "dev.tfrecord"),
      str(tmp_path), configs=[str(workdir / "realformer.json")],
      batch_size=2, bins=256)
  _check_report(report, ["trained"])
  entry = report["checkpoints"][0]
  assert entry["checkpoint_kind"] == "tf2_task_model"
  assert entry["residual_attention"]
  with open(tmp_path / attention_analysis.JSON_NAME) as f:
    assert json.load(f) == json.loads(json.dumps(report))
  assert (tmp_path / "entropy.png").stat().st_size > 0
  assert (tmp_path / "jsd.png").stat().st_size > 0


def test_two_checkpoints_side_by_side_from_the_command_line(workdir,
                                                             tmp_path):
  result = cli_testing.run("tools.analysis.attention_analysis", [
      f"--checkpoint={workdir / 'trained'}",
      f"--checkpoint={workdir / 'released'}",
      "--label=RealFormer", "--label=ETC",
      f"--config={workdir / 'realformer.json'}",
      f"--config={workdir / 'released' / 'etc_config.json'}",
      f"--data={workdir / 'dev.tfrecord'}", f"--output_dir={tmp_path}",
      "--max_examples=3", "--batch_size=2"], timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "RealFormer: 3 examples" in result.stdout
  with open(tmp_path / attention_analysis.JSON_NAME) as f:
    report = json.load(f)
  _check_report(report, ["RealFormer", "ETC"])
  kinds = [(c["checkpoint_kind"], c["residual_attention"])
           for c in report["checkpoints"]]
  assert kinds == [("tf2_task_model", True), ("official_tf1", False)]
  assert os.path.getsize(tmp_path / "entropy.png") > 0
  assert os.path.getsize(tmp_path / "jsd.png") > 0


def test_a_missing_checkpoint_is_one_line_and_exit_2(workdir, tmp_path,
                                                     capsys):
  # In process, through the binary's own guard (`cli.run` wraps `main` in
  # it): a second interpreter would cost a TensorFlow import.
  def main(argv):
    del argv
    attention_analysis.run_analysis(
        [str(tmp_path / "nope")], str(workdir / "dev.tfrecord"),
        str(tmp_path / "out"))

  with pytest.raises(SystemExit) as exit_:
    cli.guarded(main)([])
  cli_testing.assert_user_error(exit_.value.code, capsys.readouterr().err,
                                "nope")
  assert not (tmp_path / "out").exists()


def test_user_mistakes_in_the_inputs(workdir, tmp_path):
  trained, data = str(workdir / "trained"), str(workdir / "dev.tfrecord")
  with pytest.raises(UserInputError, match="etc_config.json"):
    attention_analysis.run_analysis([trained], data, str(tmp_path))
  with pytest.raises(UserInputError, match="--label"):
    attention_analysis.run_analysis([trained], data, str(tmp_path),
                                    labels=["a", "b"])
  with pytest.raises(UserInputError, match="lack"):
    attention_analysis.read_spec([data], "breakpoints")
  with pytest.raises(FileNotFoundError):
    attention_analysis.run_analysis(
        [str(workdir / "released")], str(tmp_path / "*.tfrecord"),
        str(tmp_path))
