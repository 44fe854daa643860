"""`EtcConfig`: the model configuration, compatible with `etc_config.json`.

The released ETC checkpoints ship an `etc_config.json`;
`EtcConfig.from_json_file` reads it unchanged. `EtcConfig` describes the
function the encoder computes; how it is computed (attention path, chunking,
recomputation) is an `etc_realformer.execution.ExecutionConfig`. The
RealFormer options (`residual_attention`, `residual_patterns`,
`residual_running_mean`) are this project's additions: a released JSON has
none of them, so it loads with residual attention off and reproduces the
original ETC exactly.
"""

import copy
import dataclasses
from typing import Any, Dict, Optional, Tuple

from absl import logging

from etc_realformer import json_config
from etc_realformer.errors import UserInputError
from etc_realformer.layers.activations import ACTIVATIONS

# The four attention patterns, in the order used everywhere in this project.
PATTERNS: Tuple[str, ...] = ("l2l", "l2g", "g2g", "g2l")

# Besides the 2M+1 distance ids, ETC reserves ids for: the other sentence
# (l2g/g2l), the own sentence (l2g/g2l), and cross-paragraph g2g pairs
# (multi-hop tasks).
NUM_OTHER_RELATIVE_IDS = 3

# Fields that older versions of this project wrote into `etc_config.json`
# and that now live in `ExecutionConfig` (how to compute, not what): read
# without complaint and ignored by the model.
EXECUTION_KEYS = ("att_implementation", "recompute_attention",
                  "attention_chunk_len", "recompute_residual_streams",
                  "fused_attention_kernel")


def min_relative_vocab_size(relative_pos_max_distance: int) -> int:
  """The smallest `relative_vocab_size` that fits all ids for a max distance."""
  return 2 * relative_pos_max_distance + 1 + NUM_OTHER_RELATIVE_IDS


@dataclasses.dataclass
class EtcConfig(json_config.JsonConfig):
  """Configuration of an ETC(-RealFormer) encoder.

  The first block of fields is exactly the original `EtcConfig` (same names,
  same defaults). The rest are this project's additions.
  """
  vocab_size: int
  segment_vocab_size: int = 16
  embedding_size: Optional[int] = None
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  local_radius: int = 84
  att_size_per_head: Optional[int] = None
  relative_pos_max_distance: int = 12
  relative_vocab_size: Optional[int] = 32
  max_absolute_position_embeddings: int = 0
  # When > 0: every global token's input embedding also gets a learned
  # embedding of its sentence's length, the number of long tokens that carry
  # its own-sentence relative id (clipped to this value - 1). Attention
  # averages and ETC has no absolute positions, so otherwise a summary token
  # cannot count its sentence's pieces: n [MASK] pieces look like n + 1
  # (docs/pretraining.md, "Telling each summary token its length"). A
  # table of this many rows (`sentence_length_emb_lookup`), not in the
  # released checkpoints. Needs relative ids. 0 = none, as the original.
  max_sentence_length_embeddings: int = 0
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  hidden_dropout_prob: float = 0.1
  attention_probs_dropout_prob: float = 0.1
  initializer_range: float = 0.02
  share_feed_forward_params: bool = True
  share_kv_projections: bool = False
  share_qkv_projections: bool = True
  share_att_output_projection: bool = False
  use_pre_activation_order: bool = False
  use_hard_g2l_mask: bool = False
  use_hard_l2g_mask: bool = False
  # Recompute all but the last chunk of this many layers in the backward
  # pass (0 = off). A field of the released format, so it stays here
  # although it changes only how the function is computed.
  grad_checkpointing_period: int = 0

  # --- RealFormer (residual attention), per attention pattern. ---
  # When on, every layer but the first adds the previous layers' running sum
  # of scaled raw scores (before the mask) to its own, separately for each
  # pattern listed in `residual_patterns`.
  residual_attention: bool = False
  residual_patterns: Tuple[str, ...] = PATTERNS
  # Softmax the running mean instead of the running sum (advised for 30+
  # layers in the RealFormer paper).
  residual_running_mean: bool = False

  # --- Initialisation for training from scratch (no effect on a model
  # loaded from a checkpoint; a released ETC config has none of them). ---
  # Initial relative bias (before the 1/sqrt(d) scaling of the scores) of
  # the "own sentence" id in the global queries' relative table: each
  # sentence/paragraph token starts attending to its own tokens in g2l
  # instead of uniformly over the whole input. 0 = the original's zeros.
  own_sentence_bias_init: float = 0.0
  # When > 0: the last head of the last layer's global queries starts as a
  # counter (that layer's global outputs feed no long token, so the count
  # stays out of the MLM predictions). Its initial biases are +b on the
  # token itself (g2g distance 0), -b on the other global tokens and 0 on
  # its own sentence's tokens (in place of own_sentence_bias_init), so that
  # its weight on itself is about 1 / (1 + n e^-c) for a sentence of n
  # pieces, c = b / sqrt(size per head) (the biases, as the scores, are
  # scaled). Attention averages, so without such a reference a sentence
  # token cannot tell n pieces of the same kind (a fully masked sentence)
  # from n + 1. Needs relative ids and hard g2l masking (with soft masking
  # the whole input would count).
  count_head_bias_init: float = 0.0
  # When > 0: every layer's value projection starts as a random orthogonal
  # map Q and both output projections as this factor times Q^T, so that an
  # attention layer initially adds (factor x) the attention-weighted average
  # of its inputs instead of a random projection of it (cf. "mimetic"
  # initialisation, Trockman & Kolter 2023). Needs heads x size_per_head ==
  # hidden_size. 0 = the original's truncated-normal kernels.
  value_output_identity_init: float = 0.0
  # When > 0: query and key projections start as sqrt(factor) times one
  # random orthogonal map, so that the initial scores summed over heads are
  # factor x (x . x') / sqrt(d): tokens start attending to tokens with the
  # same content. Needs heads x size_per_head == hidden_size. 0 = the
  # original's kernels.
  query_key_identity_init: float = 0.0

  # Keys found in a JSON file that this class does not know (kept, reported).
  unknown_keys: Dict[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    self.residual_patterns = tuple(self.residual_patterns)
    self.validate()

  # ------------------------------------------------------------------ checks
  def validate(self) -> None:
    """Raises `UserInputError` (a ValueError) naming the field when the
    config cannot work."""
    def fail(field, why):
      raise UserInputError(f"EtcConfig.{field}: {why}")

    json_config.check_field_types(self, "EtcConfig")
    for field in ("vocab_size", "segment_vocab_size", "hidden_size",
                  "num_hidden_layers", "num_attention_heads", "local_radius",
                  "intermediate_size"):
      value = getattr(self, field)
      if not isinstance(value, int) or value < 1:
        fail(field, f"must be a positive integer, got {value!r}")
    if self.embedding_size is not None and self.embedding_size < 1:
      fail("embedding_size", f"must be positive or null, got "
           f"{self.embedding_size!r}")
    if self.att_size_per_head is None:
      if self.hidden_size % self.num_attention_heads:
        fail("num_attention_heads",
             f"{self.num_attention_heads} does not divide hidden_size "
             f"{self.hidden_size}; set att_size_per_head")
    elif self.att_size_per_head < 1:
      fail("att_size_per_head", f"must be positive, got "
           f"{self.att_size_per_head!r}")
    if self.relative_pos_max_distance < 0:
      fail("relative_pos_max_distance", "must not be negative")
    if self.relative_vocab_size is None:
      if self.relative_pos_max_distance != 0:
        fail("relative_vocab_size", "is null, so relative_pos_max_distance "
             "must be 0")
    elif self.relative_vocab_size < min_relative_vocab_size(
        self.relative_pos_max_distance):
      fail("relative_vocab_size",
           f"{self.relative_vocab_size} is too small for "
           f"relative_pos_max_distance {self.relative_pos_max_distance}: "
           f"needs at least "
           f"{min_relative_vocab_size(self.relative_pos_max_distance)}"
           f" (2*M+1 distance ids + {NUM_OTHER_RELATIVE_IDS} others)")
    if self.max_absolute_position_embeddings < 0:
      fail("max_absolute_position_embeddings", "must not be negative")
    for field in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
      value = getattr(self, field)
      if not 0.0 <= value < 1.0:
        fail(field, f"must be in [0, 1), got {value!r}")
    if self.hidden_act not in ACTIVATIONS:
      fail("hidden_act", f"unsupported activation {self.hidden_act!r}; "
           f"choose from {ACTIVATIONS}")
    if self.grad_checkpointing_period < 0:
      fail("grad_checkpointing_period", "must not be negative")
    unknown = set(self.residual_patterns) - set(PATTERNS)
    if unknown:
      fail("residual_patterns", f"unknown patterns {sorted(unknown)}; "
           f"choose from {PATTERNS}")
    if self.own_sentence_bias_init and self.relative_vocab_size is None:
      fail("own_sentence_bias_init", "needs relative ids "
           "(relative_vocab_size is null)")
    if self.count_head_bias_init < 0:
      fail("count_head_bias_init", "must not be negative")
    if self.count_head_bias_init and (self.relative_vocab_size is None
                                      or not self.use_hard_g2l_mask):
      fail("count_head_bias_init", "needs relative ids and "
           "use_hard_g2l_mask = true")
    if self.max_sentence_length_embeddings < 0:
      fail("max_sentence_length_embeddings", "must not be negative")
    if self.max_sentence_length_embeddings and self.relative_vocab_size is None:
      fail("max_sentence_length_embeddings", "needs relative ids "
           "(relative_vocab_size is null)")
    for field in ("value_output_identity_init", "query_key_identity_init"):
      value = getattr(self, field)
      if value < 0:
        fail(field, "must not be negative")
      if value and (self.num_attention_heads * self.size_per_head
                    != self.hidden_size):
        fail(field, "needs num_attention_heads x att_size_per_head == "
             "hidden_size")

  # -------------------------------------------------------------- derived
  @property
  def size_per_head(self) -> int:
    if self.att_size_per_head is not None:
      return self.att_size_per_head
    return self.hidden_size // self.num_attention_heads

  @property
  def resolved_embedding_size(self) -> int:
    return self.embedding_size or self.hidden_size

  def carries_stream(self, pattern: str) -> bool:
    """Whether residual attention carries a score stream for `pattern`."""
    return self.residual_attention and pattern in self.residual_patterns

  # ---------------------------------------------------------------- io
  @classmethod
  def from_dict(cls, values: Dict[str, Any],
                source: str = "<dict>") -> "EtcConfig":
    """Builds a config; unknown keys are logged and kept in `unknown_keys`
    (the execution keys older files carry are dropped)."""
    missing = sorted(set(json_config.known_fields(cls)) - set(values) -
                     {"vocab_size"})
    if missing:
      logging.info("%s: keys absent, taking defaults: %s", source, missing)
    return json_config.build(cls, values, source, ignored=EXECUTION_KEYS)

  def to_dict(self) -> Dict[str, Any]:
    values = super().to_dict()
    values["residual_patterns"] = list(self.residual_patterns)
    return values

  def replace(self, **changes) -> "EtcConfig":
    """A copy with some fields changed (validated)."""
    new = copy.deepcopy(self)
    for k, v in changes.items():
      if not hasattr(new, k):
        raise UserInputError(f"EtcConfig has no field {k!r}")
      setattr(new, k, v)
    new.__post_init__()
    return new

