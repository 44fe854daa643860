"""tools.checkpoints.convert_checkpoint: released checkpoint -> TF2
checkpoint + config."""

import shutil
import subprocess
import sys

import numpy as np

import cli_testing
from conftest import GOLDEN_DIR
from etc_realformer import EtcModel, load_official_checkpoint
from etc_realformer.checkpoints.converted import (load_converted_checkpoint,
                                                  read_config)


def test_converted_checkpoint_gives_bit_identical_outputs(tmp_path):
  official = tmp_path / "official"
  shutil.copytree(GOLDEN_DIR, official)
  out = tmp_path / "converted"
  result = subprocess.run(
      [sys.executable, "-m", "tools.checkpoints.convert_checkpoint",
       f"--official_dir={official}", f"--output_dir={out}"],
      capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  assert (out / "etc_config.json").exists()

  ref = np.load(GOLDEN_DIR / "reference.npz")
  feats = {k: ref[k] for k in ref.files if not k.endswith("output") and
           not k.endswith("sparse") and k not in (
               "long_breakpoints", "global_breakpoints", "sentence_ids")}
  config = read_config(str(out))
  original = EtcModel(config)
  load_official_checkpoint(original, str(GOLDEN_DIR))
  converted = EtcModel(config)
  load_converted_checkpoint(converted, str(out))
  for impl in ("full", "sparse"):
    a = original(feats, att_implementation=impl)
    b = converted(feats, att_implementation=impl)
    assert np.array_equal(a[0].numpy(), b[0].numpy())
    assert np.array_equal(a[1].numpy(), b[1].numpy())


def test_a_directory_without_a_readable_checkpoint_is_one_line(tmp_path):
  official = tmp_path / "official"
  official.mkdir()
  shutil.copy(GOLDEN_DIR / "etc_config.json", official)
  args = [f"--official_dir={official}", f"--output_dir={tmp_path / 'out'}"]
  cli_testing.user_error_line_here("tools.checkpoints.convert_checkpoint", args,
                                   f"no checkpoint (*.index) in directory "
                                   f"{official}")
  (official / "model.ckpt.index").write_text("not a checkpoint")
  cli_testing.user_error_line_here("tools.checkpoints.convert_checkpoint", args,
                                   f"{official / 'model.ckpt'}: not a "
                                   "readable checkpoint")
  assert not (tmp_path / "out").exists()
