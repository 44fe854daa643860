"""`BertConfig`: Google's `bert_config.json`, and RealFormer's.

A released BERT or RealFormer checkpoint ships a `bert_config.json`;
`BertConfig.from_json_file` reads it unchanged. RealFormer's JSON adds
`use_running_mean`; a config that has it describes a model pre-trained with
residual attention, so residual attention is on by default for it (computing
a RealFormer checkpoint without it is silently a different function) and off
for Google's. `residual_attention` overrides either way.

`to_etc_config` gives the same function as an `EtcConfig`: BERT is this
project's encoder in its dense form (one long input whose band covers every
position, absolute positions, no relative terms, one global token nobody
attends to), so `BertModel` needs no second transformer.
"""

import dataclasses
from typing import Any, Dict, Optional

from absl import logging

from etc_realformer import json_config
from etc_realformer.config import EtcConfig
from etc_realformer.errors import UserInputError
from etc_realformer.layers.activations import ACTIVATIONS


def _same(default: Any = dataclasses.MISSING) -> Any:
  """A field `EtcConfig` has too, meaning the same (see `SAME_FIELDS`)."""
  return dataclasses.field(default=default, metadata={"etc_config": True})


@dataclasses.dataclass
class BertConfig(json_config.JsonConfig):
  """Configuration of a BERT (or RealFormer BERT) encoder.

  The fields up to `initializer_range` are Google's `BertConfig` (same names,
  same defaults), those marked `_same` copied unchanged by `to_etc_config`;
  `use_running_mean` is RealFormer's (None: not a RealFormer config);
  `residual_attention` is this project's override (None: on exactly for
  RealFormer configs).
  """
  vocab_size: int = _same()
  hidden_size: int = _same(768)
  hidden_act: str = _same("gelu")
  num_hidden_layers: int = _same(12)
  num_attention_heads: int = _same(12)
  intermediate_size: int = _same(3072)
  hidden_dropout_prob: float = _same(0.1)
  attention_probs_dropout_prob: float = _same(0.1)
  max_position_embeddings: int = 512
  type_vocab_size: int = 16
  initializer_range: float = _same(0.02)
  use_running_mean: Optional[bool] = None
  residual_attention: Optional[bool] = None
  # Keys found in a JSON file that this class does not know (kept, reported).
  unknown_keys: Dict[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    self.validate()

  def validate(self) -> None:
    """Raises `UserInputError` naming the field when the config cannot work."""
    def fail(field, why):
      raise UserInputError(f"BertConfig.{field}: {why}")

    json_config.check_field_types(self, "BertConfig")
    for field in ("vocab_size", "hidden_size", "num_hidden_layers",
                  "num_attention_heads", "intermediate_size",
                  "max_position_embeddings", "type_vocab_size"):
      value = getattr(self, field)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        fail(field, f"must be a positive integer, got {value!r}")
    if self.hidden_size % self.num_attention_heads:
      fail("num_attention_heads", f"{self.num_attention_heads} does not "
           f"divide hidden_size {self.hidden_size}")
    if self.hidden_act not in ACTIVATIONS:
      fail("hidden_act", f"unsupported activation {self.hidden_act!r}; "
           f"choose from {ACTIVATIONS}")
    for field in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
      value = getattr(self, field)
      if not 0.0 <= value < 1.0:
        fail(field, f"must be in [0, 1), got {value!r}")

  @property
  def is_realformer(self) -> bool:
    """Whether the JSON was RealFormer's (it has `use_running_mean`)."""
    return self.use_running_mean is not None

  @property
  def uses_residual_attention(self) -> bool:
    if self.residual_attention is not None:
      return self.residual_attention
    return self.is_realformer

  def to_etc_config(self) -> EtcConfig:
    """The same encoder as an `EtcConfig` (the dense form, see the module
    docstring)."""
    residual = self.uses_residual_attention
    logging.info("BertConfig: residual attention %s (%s)",
                 "on" if residual else "off",
                 "set explicitly" if self.residual_attention is not None
                 else "RealFormer config" if self.is_realformer
                 else "Google BERT config")
    return EtcConfig(
        **{field: getattr(self, field) for field in SAME_FIELDS},
        segment_vocab_size=self.type_vocab_size,
        # The band covers every position the position table allows; BERT has
        # absolute positions and no relative terms.
        local_radius=max(1, self.max_position_embeddings - 1),
        relative_pos_max_distance=0, relative_vocab_size=None,
        max_absolute_position_embeddings=self.max_position_embeddings,
        # One set of query/key/value, output and feed-forward weights.
        share_feed_forward_params=True, share_kv_projections=False,
        share_qkv_projections=True, share_att_output_projection=True,
        use_pre_activation_order=False, residual_attention=residual,
        residual_running_mean=bool(self.use_running_mean))

  # ---------------------------------------------------------------- io
  @classmethod
  def from_dict(cls, values: Dict[str, Any],
                source: str = "<dict>") -> "BertConfig":
    """Builds a config; unknown keys are logged and kept in `unknown_keys`."""
    return json_config.build(cls, values, source)

  def to_dict(self) -> Dict[str, Any]:
    values = super().to_dict()
    for key in ("use_running_mean", "residual_attention"):
      if values[key] is None:
        values.pop(key)
    return values


# Fields BERT's config and `EtcConfig` share, meaning the same.
SAME_FIELDS = tuple(field.name for field in dataclasses.fields(BertConfig)
                    if field.metadata.get("etc_config"))
