"""`python -m tools.checkpoints.lift_checkpoint`: a BERT download in, an ETC
checkpoint in the released layout out, loadable as it is."""

import json
import os
import subprocess
import sys

import tensorflow as tf

from bert_testing import write_bert_dir
import cli_testing
from etc_realformer import EtcConfig, EtcModel, load_official_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
BERT = dict(vocab_size=40, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=20,
            max_position_embeddings=12, type_vocab_size=2,
            use_running_mean=False)


def _lift(*args):
  return subprocess.run(
      [sys.executable, "-m", "tools.checkpoints.lift_checkpoint", *args],
      cwd=REPO, capture_output=True, text=True, timeout=300)


def test_lifts_into_the_released_layout(tmp_path):
  write_bert_dir(str(tmp_path / "bert"), BERT)
  out = tmp_path / "etc"
  result = _lift(f"--bert_dir={tmp_path / 'bert'}", f"--output_dir={out}",
                 "--long_seq_len=64", "--local_radius=8",
                 "--relative_pos_max_distance=2", "--relative_vocab_size=8")
  assert result.returncode == 0, result.stderr[-3000:]
  assert "dropped" in result.stdout
  config = EtcConfig.from_json_file(str(out / "etc_config.json"))
  assert config.residual_attention  # a RealFormer bert_config.json
  assert config.use_hard_g2l_mask
  report = load_official_checkpoint(EtcModel(config), str(out))
  names = {n for n, _ in tf.train.list_variables(str(out / "model.ckpt"))}
  assert "cls/predictions/output_bias" in names  # kept for pre-training
  assert "cls/predictions/output_bias" in report.ignored
  assert (out / "vocab.txt").exists()
  lifted = json.loads((out / "lifting.json").read_text())
  assert lifted["position_mode"] == "relative"
  assert lifted["global_token_id"] == 1
  assert "bert/pooler/dense/kernel" in lifted["dropped"]


def test_a_missing_directory_is_one_line_and_exit_2(tmp_path):
  # In this process: the lifting above runs the binary in one of its own.
  cli_testing.user_error_line_here(
      "tools.checkpoints.lift_checkpoint",
      [f"--bert_dir={tmp_path / 'nope'}", f"--output_dir={tmp_path / 'out'}"],
      "bert_config.json")


def test_a_checkpoint_that_cannot_be_read_is_one_line(tmp_path):
  bert = tmp_path / "bert"
  write_bert_dir(str(bert), BERT)
  data = next(bert.glob("*.data-00000-of-00001"))
  data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])
  prefix = str(data)[:-len(".data-00000-of-00001")]
  cli_testing.user_error_line_here(
      "tools.checkpoints.lift_checkpoint", [f"--bert_dir={bert}",
                                f"--output_dir={tmp_path / 'etc'}"],
      f"{prefix}: the checkpoint cannot be read")
  assert not (tmp_path / "etc").exists()
