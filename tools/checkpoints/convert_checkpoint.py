"""Converts a released ETC checkpoint into a TF2 object-based checkpoint.

    python -m tools.checkpoints.convert_checkpoint --official_dir=DIR \
        --output_dir=OUT

DIR holds a released checkpoint (`model.ckpt.*`) and its `etc_config.json`.
OUT receives `etc_config.json` and `encoder-1.{index,data-*}`, written with
`tf.train.Checkpoint(encoder=EtcModel)`; `load_converted_checkpoint` (or a
task's `init_checkpoint`) reads it back with identical weights.
"""

import os

from absl import flags
from absl import logging

from etc_realformer import cli
from etc_realformer.checkpoints.converted import save_converted_checkpoint
from etc_realformer.checkpoints.official import load_official_checkpoint
from etc_realformer.config import EtcConfig
from etc_realformer.networks.etc_model import EtcModel

FLAGS = flags.FLAGS
flags.DEFINE_string("official_dir", None,
                    "Directory of a released ETC checkpoint and its "
                    "etc_config.json.")
flags.DEFINE_string("official_checkpoint", None,
                    "Checkpoint prefix inside official_dir, if it holds "
                    "several.")
flags.DEFINE_string("output_dir", None, "Where to write the TF2 checkpoint.")


def convert(official_dir: str, output_dir: str,
            official_checkpoint: str = None) -> str:
  """Converts; returns the written checkpoint path."""
  config_path = os.path.join(official_dir, "etc_config.json")
  config = EtcConfig.from_json_file(config_path)
  model = EtcModel(config)
  report = load_official_checkpoint(model, official_checkpoint or official_dir)
  path = save_converted_checkpoint(model, output_dir)
  logging.info("converted %d variables from %s to %s", len(report.loaded),
               report.path, path)
  return path


def main(argv):
  del argv
  path = convert(FLAGS.official_dir, FLAGS.output_dir,
                 FLAGS.official_checkpoint)
  print(path)


if __name__ == "__main__":
  flags.mark_flags_as_required(["official_dir", "output_dir"])
  cli.run(main)
