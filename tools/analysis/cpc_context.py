r"""Does a pre-trained model's CPC query read its context? A probe of the
summary token of each fully masked (CPC) sentence.

    python -m tools.analysis.cpc_context --model_dir=RUN \
        [--checkpoint=RUN/ckpt-N|init] [--input='DATA/eval-*.tfrecord'] \
        [--batch_size=128] [--seed=0] \
        [--gin_file=...] [--gin_bindings=...]

The run's `operative_config.gin`, then --gin_file and --gin_bindings,
configure the task and model (as `--mode=eval` does; `--checkpoint=init`
probes the model as initialised, untrained); the batches are its
evaluation input (or --input), masked with the evaluation seed. For each
CPC sentence of a batch:

  q  = the summary token's global output in the masked example (the CPC
       prediction before the head's projection);
  q' = the same with every context piece (a real long token outside the
       example's CPC sentences) replaced by a context piece drawn from the
       whole batch: a permutation of the batch's context pieces, so the
       pieces' frequencies stay, their order and document do not.

Printed, one line `cpc_context | {...}` (and --output as JSON):

* `context_shift`: the mean |q - q'|: how far the prediction moves when
  its context becomes another text of the same words;
* `same_length_spread`, `other_length_spread`: the mean |q_a - q_b| over
  pairs of CPC sentences of the same / a different length;
* `context_share`: context_shift / same_length_spread. Near 0 the
  prediction is a function of the masked sentence's length (and position):
  whatever the loss says, the context does not reach it. A share near 1
  means that among sentences of one length the context is what tells
  predictions apart.

Why: CPC accuracy can beat chance by the length alone (a fully masked
sentence shows it); this tells whether the context path is open at all.
docs/pretraining.md, "The demo", uses it.
"""

import json
from typing import Any, Dict, Iterable, List

from absl import flags
import numpy as np
import tensorflow as tf

from etc_realformer import cli
from etc_realformer.errors import UserInputError
from etc_realformer.training import experiment
from etc_realformer.training import task as task_lib
from tasks import run
from tasks.common import output_files

# --model_dir, --checkpoint, --gin_file and --gin_bindings are the runner's
# (`tasks.run`); this tool's own flags are defined when it runs as a binary.
FLAGS = flags.FLAGS


def define_flags() -> None:
  flags.DEFINE_string("input", None, "TFRecords glob of stored pre-training "
                      "examples (default: the run's eval input).")
  flags.DEFINE_integer("batch_size", None, "Examples per batch (default: "
                       "the run's eval batch size).")
  flags.DEFINE_integer("max_batches", 1, "Batches to probe.")
  flags.DEFINE_integer("seed", 0, "Seed of the context permutation.")
  flags.DEFINE_string("output", None, "Also write the result here (JSON).")


def context_mask(features: Dict[str, tf.Tensor]) -> np.ndarray:
  """[B, L] bool: the real long tokens outside every CPC sentence."""
  breakpoints = features["long_breakpoints"].numpy()
  real = np.cumsum(breakpoints[:, ::-1], axis=1)[:, ::-1] > 0
  sentence_ids = features["sentence_ids"].numpy()
  positions = features["cpc_global_positions"].numpy()
  weights = features["cpc_weights"].numpy()
  in_cpc = np.zeros_like(real)
  for b, c in zip(*np.nonzero(weights > 0)):
    in_cpc[b] |= sentence_ids[b] == positions[b, c]
  return real & ~in_cpc


def permute_context(features: Dict[str, tf.Tensor], seed: int
                    ) -> Dict[str, tf.Tensor]:
  """`features` with the context pieces permuted across the batch."""
  tokens = features["token_ids"].numpy().copy()
  where = context_mask(features)
  pieces = tokens[where]
  tokens[where] = np.random.default_rng(seed).permutation(pieces)
  out = dict(features)
  out["token_ids"] = tf.constant(tokens, features["token_ids"].dtype)
  return out


def query_outputs(model, features: Dict[str, tf.Tensor]) -> np.ndarray:
  """[Q, H]: the summary token's global output of each CPC sentence."""
  _, global_output = model.encode(features, training=False)
  gathered = tf.gather(global_output, tf.cast(
      features["cpc_global_positions"], tf.int32), batch_dims=1).numpy()
  return gathered[features["cpc_weights"].numpy() > 0]


def probe(model, batches: Iterable[Dict[str, tf.Tensor]], seed: int = 0
          ) -> Dict[str, Any]:
  """The probe's figures over `batches` (see the module docstring); pairs
  are formed within a batch."""
  shifts: List[float] = []
  norms: List[float] = []
  same: List[np.ndarray] = []
  other: List[np.ndarray] = []
  for i, features in enumerate(batches):
    q = query_outputs(model, features)
    if not len(q):
      continue
    shifted = query_outputs(model, permute_context(features, seed + i))
    shifts.extend(np.linalg.norm(q - shifted, axis=-1).tolist())
    norms.extend(np.linalg.norm(q, axis=-1).tolist())
    lengths = features["cpc_lengths"].numpy()[
        features["cpc_weights"].numpy() > 0]
    distinct = ~np.eye(len(q), dtype=bool)
    equal = lengths[:, np.newaxis] == lengths[np.newaxis]
    distances = np.linalg.norm(q[:, np.newaxis] - q[np.newaxis], axis=-1)
    same.append(distances[equal & distinct])
    other.append(distances[~equal])
  if not shifts:
    raise UserInputError("no CPC sentence in the probed batches")
  same_all = np.concatenate(same)
  other_all = np.concatenate(other)
  shift = float(np.mean(shifts))
  same_spread = float(same_all.mean()) if same_all.size else None
  return {
      "queries": len(shifts),
      "query_norm": float(np.mean(norms)),
      "context_shift": shift,
      "same_length_spread": same_spread,
      "other_length_spread": (float(other_all.mean()) if other_all.size
                              else None),
      "context_share": (shift / same_spread if same_spread else None),
  }


def main(argv):
  if len(argv) > 1:
    raise UserInputError(f"unexpected arguments: {argv[1:]}")
  if not FLAGS.model_dir:
    raise UserInputError("--model_dir is required")
  config = f"{FLAGS.model_dir}/operative_config.gin"
  if not tf.io.gfile.exists(config):
    raise UserInputError(f"{config}: not found (is --model_dir a "
                         "pre-training run?)")
  run.register_tasks()
  bindings = list(FLAGS.gin_bindings)
  if FLAGS.input:
    bindings.append(f"PretrainTask.eval_input = {FLAGS.input!r}")
  run.parse_gin([config] + list(FLAGS.gin_file), bindings)
  task = task_lib.task_class()()
  if not hasattr(task, "cpc_head"):
    raise UserInputError(f"{config}: not a pre-training run")
  batch_size = FLAGS.batch_size or experiment.TrainerConfig().eval_batch_size
  dataset = task.build_inputs("eval", batch_size)
  batches = [dict(b) for _, b in zip(range(FLAGS.max_batches), dataset)]
  if not batches:
    raise UserInputError(f"{task.input_patterns['eval']}: no examples")
  model = task.build_model()
  model(batches[0], training=False)
  if FLAGS.checkpoint != "init":
    experiment.restore_for_inference(model, FLAGS.model_dir,
                                     FLAGS.checkpoint)
  result = probe(model, batches, FLAGS.seed)
  print("cpc_context | " + json.dumps(result, sort_keys=True), flush=True)
  if FLAGS.output:
    output_files.write_json(FLAGS.output, result, sort_keys=True)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
