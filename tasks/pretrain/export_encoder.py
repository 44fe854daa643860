r"""Exports a pre-trained encoder in the released ETC format.

  python -m tasks.pretrain.export_encoder --model_dir=M --output_dir=OUT \
      [--checkpoint=M/ckpt-63000] [--gin_file=... --gin_bindings=...]

rebuilds the task from `M/operative_config.gin` (then the given gin files
and bindings), restores the latest (or `--checkpoint`) training checkpoint
and writes to OUT:

  model.ckpt.*        the encoder only, name-based, as the released ETC
                      checkpoints (`etc_document_bert/...`; the MLM and CPC
                      heads are dropped), written by
                      `etc_realformer.checkpoints.official.save_official_checkpoint`
  etc_config.json     its config
  vocab.txt / *.model the task's vocabulary, when it names one

OUT is what a fine-tuning task's `etc_config.config_file` and
`TrainerConfig.init_checkpoint` take, here and in the original ETC code.
(The training checkpoint itself, `model/encoder/...`, is accepted by
`init_checkpoint` as well.)
"""

import os
import shutil
from typing import Optional

from absl import flags
import gin

from etc_realformer import cli
from etc_realformer.checkpoints.official import save_official_checkpoint
from etc_realformer.errors import UserInputError
from etc_realformer.training import experiment
from etc_realformer.training import task as task_lib
from tasks import run

CONFIG_FILE = "etc_config.json"
CHECKPOINT_PREFIX = "model.ckpt"


def export_encoder(model_dir: str, output_dir: str,
                   checkpoint: Optional[str] = None,
                   gin_files=(), gin_bindings=()) -> str:
  """Restores the run in `model_dir` and writes its encoder to `output_dir`
  (see the module docstring); returns the checkpoint prefix.

  Raises:
    FileNotFoundError: no operative config or checkpoint in `model_dir`.
  """
  operative = os.path.join(model_dir, "operative_config.gin")
  if not os.path.exists(operative):
    raise FileNotFoundError(f"{operative}: not found; --model_dir must be a "
                            "training run's directory")
  run.register_tasks()
  gin.clear_config()
  # The heads are dropped: nothing needs loading besides the checkpoint.
  run.parse_gin([operative, *gin_files],
                [*gin_bindings, "TrainerConfig.init_checkpoint = None"])
  task = task_lib.task_class()()
  model = task.build_model()
  model(task.dummy_features(), training=False)
  experiment.restore_for_inference(model, model_dir, checkpoint)
  os.makedirs(output_dir, exist_ok=True)
  prefix = save_official_checkpoint(
      model.encoder, os.path.join(output_dir, CHECKPOINT_PREFIX))
  model.encoder.config.to_json_file(os.path.join(output_dir, CONFIG_FILE))
  for vocab in (getattr(task, "vocab_file", None),
                getattr(task, "spm_model_file", None)):
    if vocab:
      shutil.copy(vocab, os.path.join(output_dir, os.path.basename(vocab)))
  return prefix


def main(argv):
  if len(argv) > 1:
    raise UserInputError(f"unexpected arguments: {list(argv[1:])}")
  f = flags.FLAGS
  missing = [f"--{n}" for n in ("model_dir", "output_dir") if not f[n].value]
  if missing:
    raise UserInputError(f"{', '.join(missing)} required")
  prefix = export_encoder(f.model_dir, f.output_dir, f.checkpoint,
                          f.gin_file, f.gin_bindings)
  print(f"export_encoder | {prefix}", flush=True)


if __name__ == "__main__":
  flags.DEFINE_string("output_dir", None, "Where the released-format "
                      "checkpoint goes.")
  cli.run(main)
