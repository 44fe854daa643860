r"""Lifts a BERT-format checkpoint (BERT, RealFormer) into ETC(-RealFormer).

    python -m tools.checkpoints.lift_checkpoint \
        --bert_dir=realformer_bert_base \
        --output_dir=etc_realformer_base [--long_seq_len=4096] \
        [--position_mode=relative|tiled] [--residual_attention]

BERT_DIR holds `bert_config.json`, the checkpoint (`bert_model.ckpt.*` or
`model.ckpt.*`) and `vocab.txt`. OUT receives a checkpoint in the released
ETC layout (`model.ckpt.*`, with BERT's masked-LM head kept as
`cls/predictions/*` at its root), its `etc_config.json`, the vocabulary, and
`lifting.json`: every copied name with its source, every new name, every
dropped one, and the options. What is copied, what is new and how it is
initialised: `etc_realformer/checkpoints/lifting.py`. The result loads with
`load_official_checkpoint`, as a task's `init_checkpoint`, and as the start
of continued pre-training, which a lifted model needs at long length before
fine-tuning (it has never seen global tokens or relative positions).
"""

import json
import os
import shutil

from absl import flags

from etc_realformer import cli
from etc_realformer.bert_config import BertConfig
from etc_realformer.checkpoints import bert as bert_checkpoints
from etc_realformer.checkpoints import lifting
from etc_realformer.checkpoints.official import save_official_checkpoint

FLAGS = flags.FLAGS
flags.DEFINE_string("bert_dir", None, "Directory of the BERT checkpoint, its "
                    "bert_config.json and vocab.txt.")
flags.DEFINE_string("bert_checkpoint", None,
                    "Checkpoint prefix, if bert_dir holds several.")
flags.DEFINE_string("output_dir", None, "Where the ETC checkpoint goes.")
flags.DEFINE_integer("long_seq_len", 4096, "The long input length (tiled "
                     "positions are this long).")
flags.DEFINE_enum("position_mode", "relative", lifting.POSITION_MODES,
                  "relative: the ETC paper's recipe (absolute positions "
                  "dropped, relative tables fresh); tiled: BERT's positions "
                  "tiled to the long length and relative tables zero.")
flags.DEFINE_bool("residual_attention", None,
                  "Residual attention (RealFormer); default: on for a "
                  "RealFormer bert_config.json, off for Google's.")
flags.DEFINE_integer("local_radius", 84, "ETC's l2l radius.")
flags.DEFINE_integer("relative_pos_max_distance", 12, "ETC's M.")
flags.DEFINE_integer("relative_vocab_size", 32, "ETC's relative vocabulary.")
flags.DEFINE_bool("use_hard_g2l_mask", True, "As the released checkpoints.")
flags.DEFINE_integer("global_token_id", 1, "The id of the global summary "
                     "tokens the pre-training task uses (recorded in "
                     "lifting.json).")
flags.DEFINE_bool("lower_case", True, "Whether the vocabulary is uncased "
                  "(recorded in lifting.json for the task binaries).")
flags.DEFINE_bool("share_qkv_projections", True, "ETC sharing option.")
flags.DEFINE_bool("share_kv_projections", False, "ETC sharing option.")
flags.DEFINE_bool("share_att_output_projection", False, "ETC sharing option.")
flags.DEFINE_bool("share_feed_forward_params", True, "ETC sharing option.")

VOCAB_NAMES = ("vocab.txt", "30k-clean.model")
# The flags that set `EtcConfig` fields of the lifted model.
ETC_FLAGS = ("local_radius", "relative_pos_max_distance", "relative_vocab_size",
             "use_hard_g2l_mask", "share_qkv_projections",
             "share_kv_projections", "share_att_output_projection",
             "share_feed_forward_params")


def lift_directory(bert_dir: str, output_dir: str,
                   options: lifting.LiftOptions,
                   checkpoint: str = None, extra: dict = None) -> dict:
  """Lifts BERT_DIR into OUTPUT_DIR; returns the lifting report (JSON)."""
  bert_config = BertConfig.from_json_file(
      os.path.join(bert_dir, "bert_config.json"))
  tensors = bert_checkpoints.read_checkpoint(checkpoint or bert_dir)
  model, heads, report = lifting.lift(bert_config, tensors, options)
  os.makedirs(output_dir, exist_ok=True)
  prefix = save_official_checkpoint(
      model, os.path.join(output_dir, "model.ckpt"), extra=heads)
  model.config.to_json_file(os.path.join(output_dir, "etc_config.json"))
  vocab = [n for n in VOCAB_NAMES if os.path.exists(os.path.join(bert_dir, n))]
  for name in vocab:
    shutil.copy(os.path.join(bert_dir, name), os.path.join(output_dir, name))
  result = lifting.report_dict(report, options, bert_config)
  result.update(checkpoint=prefix, vocabulary=vocab, **(extra or {}))
  with open(os.path.join(output_dir, "lifting.json"), "w") as f:
    json.dump(result, f, indent=2, sort_keys=True)
  return result


def main(argv):
  del argv
  f = FLAGS
  options = lifting.LiftOptions(
      long_seq_len=f.long_seq_len, position_mode=f.position_mode,
      residual_attention=f.residual_attention,
      etc={name: f[name].value for name in ETC_FLAGS})
  report = lift_directory(
      f.bert_dir, f.output_dir, options, f.bert_checkpoint,
      extra={"global_token_id": f.global_token_id,
             "lower_case": f.lower_case})
  print(f"lifted {len(report['copied'])} tensors, {len(report['fresh'])} new, "
        f"{len(report['dropped'])} dropped ({', '.join(report['dropped'])}); "
        f"checkpoint {report['checkpoint']}")


if __name__ == "__main__":
  flags.mark_flags_as_required(["bert_dir", "output_dir"])
  cli.run(main)
