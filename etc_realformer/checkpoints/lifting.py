"""Lifting a BERT-format checkpoint (BERT, RealFormer) into ETC(-RealFormer).

The ETC paper started its large model from RoBERTa this way: the weights a
transformer layer shares with an ETC layer are copied, what ETC adds starts
fresh, and pre-training at long length then teaches the model its global
tokens and relative positions. `lift` does it for Google-format checkpoints:

copied (name by name, see `LiftReport.copied`):
  * word embeddings -> `token_emb_lookup`; the token-type rows -> the first
    rows of `segment_emb_lookup` (16 rows in ETC; the rest fresh);
  * the embeddings' LayerNorm -> both `long_emb_layer_norm` and
    `global_emb_layer_norm`;
  * per layer, query / key / value -> every ETC projection that exists under
    the sharing options (with the default `share_qkv_projections` one set,
    unshared configs get a copy for the long and the global input); the attention output dense ->
    `long_output_projection` (and `global_output_projection` when unshared);
    its LayerNorm -> `layer_norm_0` and `layer_norm_1`; intermediate / output
    dense and their LayerNorm -> the feed-forward (one copy per input when
    unshared);
  * the masked-LM head `cls/predictions/*`, kept under its BERT names at the
    checkpoint's root beside `etc_document_bert/`, for continued
    pre-training.
new:
  * `position_mode="relative"` (the ETC paper's recipe): the relative position
    tables, as `EtcModel` initialises them (embeddings truncated normal with
    stddev 0.5, as the original ETC's relative attention; biases 0); no
    absolute positions;
  * `position_mode="tiled"`: BERT's position table copied end to end up to
    the long length (as the Longformer conversion does) into both absolute
    tables, and the relative tables all zero, so that a short input whose
    global tokens are masked out gives BERT's output exactly.
dropped (listed in `LiftReport.dropped`): the absolute positions in relative
mode, the pooler, the next-sentence head, optimizer slots.
"""

import dataclasses
from typing import Any, Dict, List, Mapping, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from etc_realformer.bert_config import SAME_FIELDS
from etc_realformer.bert_config import BertConfig
from etc_realformer.config import EtcConfig
from etc_realformer.errors import UserInputError
from etc_realformer.networks.etc_model import EtcModel

POSITION_MODES = ("relative", "tiled")
ROOT = "etc_document_bert"
_LAYERS = f"{ROOT}/global_local_transformer_layers"


# The ETC side of a lifted model by default: the released ETC-base's.
ETC_BASE = dict(local_radius=84, relative_pos_max_distance=12,
                relative_vocab_size=32, segment_vocab_size=16,
                use_hard_g2l_mask=True, use_hard_l2g_mask=False,
                share_qkv_projections=True, share_kv_projections=False,
                share_att_output_projection=False,
                share_feed_forward_params=True)


@dataclasses.dataclass
class LiftOptions:
  """How to lift.

  Attributes:
    long_seq_len: the long input length (tiled positions are this long).
    position_mode: "relative" or "tiled" (see the module docstring).
    residual_attention: None = the BERT config's choice.
    etc: `EtcConfig` fields of the ETC side, over `ETC_BASE`.
  """
  long_seq_len: int = 4096
  position_mode: str = "relative"
  residual_attention: Optional[bool] = None
  etc: Dict[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if self.position_mode not in POSITION_MODES:
      raise UserInputError(f"position_mode {self.position_mode!r} is not one "
                           f"of {POSITION_MODES}")
    if self.long_seq_len < 1:
      raise UserInputError(f"long_seq_len must be positive, got "
                           f"{self.long_seq_len}")
    unknown = sorted(set(self.etc) - set(ETC_BASE))
    if unknown:
      raise UserInputError(f"lifting options {unknown} are not among "
                           f"{sorted(ETC_BASE)}")

  @property
  def etc_side(self) -> Dict[str, Any]:
    return {**ETC_BASE, **self.etc}


class LiftReport(NamedTuple):
  """Where every tensor of the lifted checkpoint came from."""
  copied: Dict[str, str]      # ETC name -> the BERT name it came from
  fresh: List[str]            # ETC names initialised anew (or in part)
  dropped: List[str]          # BERT names not carried over
  kept_heads: List[str]       # BERT head names carried over unchanged


def etc_config_for(bert: BertConfig, options: LiftOptions) -> EtcConfig:
  """The `EtcConfig` of the lifted model."""
  etc = options.etc_side
  if etc["segment_vocab_size"] < bert.type_vocab_size:
    raise UserInputError(
        f"segment_vocab_size {etc['segment_vocab_size']} is smaller than the "
        f"BERT config's type_vocab_size {bert.type_vocab_size}")
  residual = (bert.uses_residual_attention
              if options.residual_attention is None
              else options.residual_attention)
  return EtcConfig(
      **{field: getattr(bert, field) for field in SAME_FIELDS}, **etc,
      max_absolute_position_embeddings=(
          options.long_seq_len if options.position_mode == "tiled" else 0),
      residual_attention=residual,
      residual_running_mean=bool(bert.use_running_mean))


def _sources(config: EtcConfig, layer: int) -> Dict[str, str]:
  """ETC variable name (without the root) -> BERT name, for one layer."""
  bert = f"bert/encoder/layer_{layer}"
  att = f"fused_att_layer_{layer}/fused_global_local_att"
  out = {}
  for kind, source in (("query", "query"), ("key", "key"),
                       ("value", "value")):
    patterns = (("long", "global") if kind == "query" else
                ("l2l", "l2g", "g2g", "g2l"))
    for pattern in patterns:
      for part in ("kernel", "bias"):
        out[f"{att}/{pattern}_{kind}_projection/linear/{part}"] = (
            f"{bert}/attention/self/{source}/{part}")
  for side in ("long", "global"):
    for part in ("kernel", "bias"):
      out[f"{att}/{side}_output_projection/{part}"] = (
          f"{bert}/attention/output/dense/{part}")
  for norm in ("layer_norm_0", "layer_norm_1"):
    for part in ("gamma", "beta"):
      out[f"fused_att_layer_{layer}/{norm}/{part}"] = (
          f"{bert}/attention/output/LayerNorm/{part}")
  ff_scopes = ([f"feed_forward_layer_{layer}"]
               if config.share_feed_forward_params else
               [f"long_feed_forward_layer_{layer}",
                f"global_feed_forward_layer_{layer}"])
  for scope in ff_scopes:
    for part in ("kernel", "bias"):
      out[f"{scope}/dense_layers/layer_0/{part}"] = (
          f"{bert}/intermediate/dense/{part}")
      out[f"{scope}/dense_layers/layer_1/{part}"] = (
          f"{bert}/output/dense/{part}")
    for part in ("gamma", "beta"):
      out[f"{scope}/layer_norm/{part}"] = f"{bert}/output/LayerNorm/{part}"
  return {f"{_LAYERS}/{k}": v for k, v in out.items()}


def lift(bert_config: BertConfig, bert_tensors: Mapping[str, np.ndarray],
         options: LiftOptions):
  """Builds the lifted encoder.

  Args:
    bert_config: the BERT config.
    bert_tensors: every tensor of the BERT checkpoint, by name.
    options: the ETC side.

  Returns:
    (model: a built `EtcModel` holding the lifted weights, heads: the BERT
    head tensors kept (name -> value), report: a `LiftReport`).

  Raises:
    UserInputError: the checkpoint lacks a tensor the config implies, or
      holds one of another shape (every such name listed).
  """
  config = etc_config_for(bert_config, options)
  model = EtcModel(config)
  model.build()
  variables = model.official_variables()

  sources = {
      f"{ROOT}/token_emb_lookup/embedding_table":
          "bert/embeddings/word_embeddings",
  }
  for side in ("long", "global"):
    for part in ("gamma", "beta"):
      sources[f"{ROOT}/{side}_emb_layer_norm/{part}"] = (
          f"bert/embeddings/LayerNorm/{part}")
  for layer in range(config.num_hidden_layers):
    sources.update(_sources(config, layer))
  sources = {k: v for k, v in sources.items() if k in variables}

  problems = []
  for etc_name, bert_name in sorted(sources.items()):
    if bert_name not in bert_tensors:
      problems.append(f"missing {bert_name} (for {etc_name})")
    elif list(bert_tensors[bert_name].shape) != (
        variables[etc_name].shape.as_list()):
      problems.append(f"{bert_name}: checkpoint "
                      f"{list(bert_tensors[bert_name].shape)} vs "
                      f"{variables[etc_name].shape.as_list()} for {etc_name}")
  for name in ("bert/embeddings/token_type_embeddings",
               "bert/embeddings/position_embeddings"):
    if name not in bert_tensors:
      problems.append(f"missing {name}")
  if problems:
    raise UserInputError("the BERT checkpoint does not fit its config: " +
                         "; ".join(problems))

  for etc_name, bert_name in sources.items():
    variables[etc_name].assign(bert_tensors[bert_name])
  copied = dict(sources)
  fresh = []

  segments_name = f"{ROOT}/segment_emb_lookup/embedding_table"
  segments = variables[segments_name]
  types = bert_tensors["bert/embeddings/token_type_embeddings"]
  table = segments.numpy()
  table[:types.shape[0]] = types
  segments.assign(table)
  copied[segments_name] = (
      f"bert/embeddings/token_type_embeddings (rows 0-{types.shape[0] - 1})")
  if types.shape[0] < table.shape[0]:
    fresh.append(f"{segments_name} (rows {types.shape[0]}-"
                 f"{table.shape[0] - 1})")

  positions = bert_tensors["bert/embeddings/position_embeddings"]
  relative = [n for n in variables if "relative_" in n]
  dropped = []
  if options.position_mode == "tiled":
    reps = -(-options.long_seq_len // positions.shape[0])
    tiled = np.tile(positions, [reps, 1])[:options.long_seq_len]
    for name in ("position_emb_lookup_long/embedding_table",
                 "position_emb_lookup_global/embedding_table"):
      variables[name].assign(tiled)
      copied[name] = "bert/embeddings/position_embeddings (tiled)"
    for name in relative:
      variables[name].assign(tf.zeros_like(variables[name]))
      fresh.append(f"{name} (zeros)")
  else:
    dropped.append("bert/embeddings/position_embeddings")
    fresh.extend(sorted(relative))

  heads = {k: v for k, v in bert_tensors.items()
           if k.startswith("cls/predictions/")}
  used = set(sources.values()) | {"bert/embeddings/token_type_embeddings",
                                  "bert/embeddings/position_embeddings"}
  dropped.extend(sorted(k for k in bert_tensors
                        if k not in used and k not in heads))
  missing = sorted(set(variables) - set(copied) -
                   {f.split(" ")[0] for f in fresh})
  if missing:  # Every variable is accounted for, or the mapping is wrong.
    raise AssertionError(f"lifting leaves unassigned: {missing}")
  return model, heads, LiftReport(copied, sorted(fresh), dropped,
                                  sorted(heads))


def report_dict(report: LiftReport, options: LiftOptions,
                bert_config: BertConfig) -> Dict[str, Any]:
  """The JSON written beside a lifted checkpoint."""
  return {"position_mode": options.position_mode,
          "options": dataclasses.asdict(options),
          "bert_config": bert_config.to_dict(),
          "copied": report.copied, "fresh": report.fresh,
          "dropped": report.dropped, "kept_heads": report.kept_heads}
