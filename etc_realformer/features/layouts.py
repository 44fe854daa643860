"""The side inputs of a task's raw features, by how the task stores them.

Tasks keep the structure the side inputs come from in one of a few forms
(a layout): breakpoints, input masks, or paragraphs. `from_features` is the
one wiring from those features and an `EtcConfig` to the eight side inputs;
`Task.side_inputs` calls it with the task's `side_input_layout`.
"""

from typing import Any, Dict, Mapping

from etc_realformer.features import multihop
from etc_realformer.features import side_inputs
from etc_realformer.features.validation import SideInputs

# How each kind of task stores the structure the side inputs come from:
# layout -> the raw feature names it reads.
LAYOUT_FEATURES = {
    # One example per row, breakpoints at the last token (ETC pre-training,
    # NQ): `side_inputs.make_global_local_side_inputs`.
    "breakpoints": ("long_breakpoints", "global_breakpoints",
                    "sentence_ids"),
    # Input masks as example ids (OpenKP):
    # `make_global_local_side_inputs_from_example_ids`.
    "input_masks": ("long_input_mask", "global_input_mask",
                    "long_sentence_ids"),
    # Paragraphs, sentences and exemptions (WikiHop, HotpotQA):
    # `multihop.make_multihop_side_inputs`.
    "multihop": ("long_paragraph_breakpoints", "long_paragraph_ids",
                 "long_sentence_ids", "global_paragraph_breakpoints",
                 "ignore_hard_g2l_mask"),
}


def from_features(config, features: Mapping[str, Any], layout: str
                  ) -> SideInputs:
  """The eight side inputs of a task's raw features (batched or not).

  Args:
    config: an `EtcConfig` (reads `local_radius`, `relative_pos_max_distance`,
      `use_hard_g2l_mask`, `use_hard_l2g_mask`).
    features: the raw features `LAYOUT_FEATURES[layout]` names (multihop:
      `l2g_linked_ids` too when present).
    layout: a key of `LAYOUT_FEATURES`.

  Returns:
    The eight `SIDE_INPUT_KEYS` (ids None when M is 0).
  """
  if layout not in LAYOUT_FEATURES:
    raise ValueError(f"side-input layout {layout!r} is not one of "
                     f"{sorted(LAYOUT_FEATURES)}")
  missing = [k for k in LAYOUT_FEATURES[layout] if k not in features]
  if missing:
    raise ValueError(f"features for the {layout!r} side inputs: missing "
                     f"{missing}")
  options = dict(local_radius=config.local_radius,
                 relative_pos_max_distance=config.relative_pos_max_distance,
                 use_hard_g2l_mask=config.use_hard_g2l_mask,
                 use_hard_l2g_mask=config.use_hard_l2g_mask)
  if layout == "breakpoints":
    return side_inputs.make_global_local_side_inputs(
        features["long_breakpoints"], features["global_breakpoints"],
        features["sentence_ids"], **options)
  if layout == "input_masks":
    return side_inputs.make_global_local_side_inputs_from_example_ids(
        features["long_input_mask"], features["global_input_mask"],
        features["long_sentence_ids"], **options)
  return multihop.make_multihop_side_inputs(
      long_paragraph_breakpoints=features["long_paragraph_breakpoints"],
      long_paragraph_ids=features["long_paragraph_ids"],
      long_sentence_ids=features["long_sentence_ids"],
      global_paragraph_breakpoints=features["global_paragraph_breakpoints"],
      ignore_hard_g2l_mask=features["ignore_hard_g2l_mask"],
      l2g_linked_ids=features.get("l2g_linked_ids"), **options)


def with_side_inputs(config, features: Mapping[str, Any], layout: str
                     ) -> Dict[str, Any]:
  """`features` plus their side inputs, without None entries (for
  `tf.data.Dataset.map`)."""
  return {**features,
          **side_inputs.drop_none_values(
              from_features(config, features, layout))}
