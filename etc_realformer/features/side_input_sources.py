"""The raw features a task's side inputs come from, and the wiring to them.

Tasks keep the structure the side inputs come from in one of a few forms
(a side-input source): breakpoints, input masks, or paragraphs.
`from_features` is the one wiring from those features and an `EtcConfig` to
the eight side inputs; `Task.side_inputs` calls it with the task's
`side_input_source`.
"""

from typing import Any, Dict, Mapping

from etc_realformer.features import multihop
from etc_realformer.features import side_inputs
from etc_realformer.features.feature_names import (
    GLOBAL_BREAKPOINTS, GLOBAL_INPUT_MASK, GLOBAL_PARAGRAPH_BREAKPOINTS,
    IGNORE_HARD_G2L_MASK, L2G_LINKED_IDS, LONG_BREAKPOINTS, LONG_INPUT_MASK,
    LONG_PARAGRAPH_BREAKPOINTS, LONG_PARAGRAPH_IDS, LONG_SENTENCE_IDS,
    SENTENCE_IDS)
from etc_realformer.features.validation import SideInputs

# How each kind of task stores the structure the side inputs come from:
# source -> the raw feature names it reads.
SOURCE_FEATURES = {
    # One example per row, breakpoints at the last token (ETC pre-training,
    # NQ): `side_inputs.make_global_local_side_inputs`.
    "breakpoints": (LONG_BREAKPOINTS, GLOBAL_BREAKPOINTS, SENTENCE_IDS),
    # Input masks as example ids (OpenKP):
    # `make_global_local_side_inputs_from_example_ids`.
    "input_masks": (LONG_INPUT_MASK, GLOBAL_INPUT_MASK, LONG_SENTENCE_IDS),
    # Paragraphs, sentences and exemptions (WikiHop, HotpotQA):
    # `multihop.make_multihop_side_inputs`.
    "multihop": (LONG_PARAGRAPH_BREAKPOINTS, LONG_PARAGRAPH_IDS,
                 LONG_SENTENCE_IDS, GLOBAL_PARAGRAPH_BREAKPOINTS,
                 IGNORE_HARD_G2L_MASK),
}


def from_features(config, features: Mapping[str, Any], source: str
                  ) -> SideInputs:
  """The eight side inputs of a task's raw features (batched or not).

  Args:
    config: an `EtcConfig` (reads `local_radius`, `relative_pos_max_distance`,
      `use_hard_g2l_mask`, `use_hard_l2g_mask`).
    features: the raw features `SOURCE_FEATURES[source]` names (multihop:
      `l2g_linked_ids` too when present).
    source: a key of `SOURCE_FEATURES`.

  Returns:
    The eight `SIDE_INPUT_KEYS` (ids None when M is 0).
  """
  if source not in SOURCE_FEATURES:
    raise ValueError(f"side-input source {source!r} is not one of "
                     f"{sorted(SOURCE_FEATURES)}")
  missing = [k for k in SOURCE_FEATURES[source] if k not in features]
  if missing:
    raise ValueError(f"features for the {source!r} side inputs: missing "
                     f"{missing}")
  options = dict(local_radius=config.local_radius,
                 relative_pos_max_distance=config.relative_pos_max_distance,
                 use_hard_g2l_mask=config.use_hard_g2l_mask,
                 use_hard_l2g_mask=config.use_hard_l2g_mask)
  if source == "breakpoints":
    return side_inputs.make_global_local_side_inputs(
        features[LONG_BREAKPOINTS], features[GLOBAL_BREAKPOINTS],
        features[SENTENCE_IDS], **options)
  if source == "input_masks":
    return side_inputs.make_global_local_side_inputs_from_example_ids(
        features[LONG_INPUT_MASK], features[GLOBAL_INPUT_MASK],
        features[LONG_SENTENCE_IDS], **options)
  return multihop.make_multihop_side_inputs(
      long_paragraph_breakpoints=features[LONG_PARAGRAPH_BREAKPOINTS],
      long_paragraph_ids=features[LONG_PARAGRAPH_IDS],
      long_sentence_ids=features[LONG_SENTENCE_IDS],
      global_paragraph_breakpoints=features[GLOBAL_PARAGRAPH_BREAKPOINTS],
      ignore_hard_g2l_mask=features[IGNORE_HARD_G2L_MASK],
      l2g_linked_ids=features.get(L2G_LINKED_IDS), **options)


def with_side_inputs(config, features: Mapping[str, Any], source: str
                     ) -> Dict[str, Any]:
  """`features` plus their side inputs, without None entries (for
  `tf.data.Dataset.map`)."""
  return {**features,
          **side_inputs.drop_none_values(
              from_features(config, features, source))}
