"""Side inputs with paragraph structure, for multi-hop QA (WikiHop, HotpotQA).

As the original ETC's multi-hop feature code: local attention stays inside a
long paragraph, sentence and paragraph global tokens own their long tokens,
some global tokens (question, candidates) are exempt from the hard g2l mask,
and g2g pairs across paragraphs get an id of their own. Shapes and argument
conventions as `side_inputs`.
"""

import tensorflow as tf

from etc_realformer.features import masks
from etc_realformer.features import validation
from etc_realformer.features.side_inputs import global_local_core
from etc_realformer.features.side_inputs import assemble
from etc_realformer.features.side_inputs import links
from etc_realformer.features.side_inputs import soft_masks
from etc_realformer.features.validation import SideInputs


def make_multihop_side_inputs(
    long_paragraph_breakpoints,
    long_paragraph_ids,
    long_sentence_ids,
    global_paragraph_breakpoints,
    local_radius: int,
    relative_pos_max_distance: int,
    use_hard_g2l_mask: bool = False,
    ignore_hard_g2l_mask=None,
    use_hard_l2g_mask: bool = False,
    ignore_hard_l2g_mask=None,
    flat_sequence: bool = False,
    l2g_linked_ids=None) -> SideInputs:
  """Paragraph-aware side inputs for multi-hop QA (WikiHop, HotpotQA).

  One (unpacked) example per row. The long input is split into paragraphs
  (the question counts as one) by `long_paragraph_breakpoints`; the global
  input likewise by `global_paragraph_breakpoints`, each paragraph token
  placed before its sentence tokens. Then, as in the original ETC code:

  * l2l: sliding window that does not cross long paragraph breakpoints.
  * g2g, l2g, g2l: every non-padding token sees every non-padding token
    (padding sees padding).
  * hard g2l (optional): global token g sees long token i only if g is i's
    sentence token or paragraph token, or `ignore_hard_g2l_mask[g] == 1`
    (e.g. CLS). Hard l2g is the mirror image with `ignore_hard_l2g_mask[i]`.
  * l2l ids: the usual window pattern. l2g/g2l ids: 2M+2 if g is i's
    sentence token, paragraph token or `l2g_linked_ids[i]`, else 2M+1.
  * g2g ids: distance ids within a global paragraph segment, 2M+3 across
    segments (padding forms a segment of its own).

  With `flat_sequence=True` the paragraph structure is ignored and this is
  `make_global_local_side_inputs_from_example_ids` on the input masks
  (paragraph ids, ignore masks and `l2g_linked_ids` are then unused).

  Args:
    long_paragraph_breakpoints: <int>[B, L], 1 at the last token of every
      long paragraph (and of the question); padding follows the last 1.
    long_paragraph_ids: <int>[B, L] index of each long token's paragraph
      global token, -1 for none (e.g. question tokens, padding).
    long_sentence_ids: <int>[B, L] index of each long token's sentence global
      token, -1 for none.
    global_paragraph_breakpoints: <int>[B, G], 1 at the last global token of
      every paragraph segment; padding follows the last 1.
    local_radius: `r` >= 1.
    relative_pos_max_distance: `M` >= 0; 0 skips relative ids (None values).
    use_hard_g2l_mask: See above.
    ignore_hard_g2l_mask: Optional <int>[B, G] 0/1, global tokens exempt from
      the hard g2l mask (used only with `use_hard_g2l_mask`).
    use_hard_l2g_mask: See above.
    ignore_hard_l2g_mask: Optional <int>[B, L] 0/1, long tokens exempt from
      the hard l2g mask (used only with `use_hard_l2g_mask`).
    flat_sequence: See above.
    l2g_linked_ids: Optional <int>[B, L] an extra global token index per long
      token that gets the own-sentence id (-1 for none). Affects only ids.

  Returns:
    Dict with the eight `SIDE_INPUT_KEYS` (shapes as in
    `make_global_local_side_inputs_from_example_ids`).

  Raises:
    ValueError: on bad ranks, dtypes, mismatched shapes, `local_radius` < 1,
      negative `relative_pos_max_distance`, non-binary breakpoints, or
      sentence/paragraph/linked ids outside [-1, G) at non-padding tokens.
  """
  local_radius, relative_pos_max_distance = (
      validation.check_radius_and_distance(local_radius,
                                           relative_pos_max_distance))
  t, unbatched = validation.prepare(
      dict(long_paragraph_breakpoints=long_paragraph_breakpoints,
           long_paragraph_ids=long_paragraph_ids,
           long_sentence_ids=long_sentence_ids,
           ignore_hard_l2g_mask=ignore_hard_l2g_mask,
           l2g_linked_ids=l2g_linked_ids),
      dict(global_paragraph_breakpoints=global_paragraph_breakpoints,
           ignore_hard_g2l_mask=ignore_hard_g2l_mask))
  validation.check_binary("long_paragraph_breakpoints",
                          t["long_paragraph_breakpoints"])
  validation.check_binary("global_paragraph_breakpoints",
                t["global_paragraph_breakpoints"])

  with tf.name_scope("make_multihop_side_inputs"):
    long_segments = masks.example_ids_from_breakpoints(
        t["long_paragraph_breakpoints"])
    global_segments = masks.example_ids_from_breakpoints(
        t["global_paragraph_breakpoints"])
    long_input_mask = tf.minimum(long_segments, 1)
    global_input_mask = tf.minimum(global_segments, 1)
    global_static_len = t["global_paragraph_breakpoints"].shape[1]
    for name in ("long_sentence_ids", "long_paragraph_ids", "l2g_linked_ids"):
      if name in t:
        validation.check_ids_in_range(
            name, t[name], t["long_paragraph_breakpoints"], -1,
            global_static_len, real_from_breakpoints=True)

    if flat_sequence:
      # No structure beyond sentences: the plain ETC pattern over the masks.
      result = global_local_core(
          long_input_mask, global_input_mask, t["long_sentence_ids"],
          local_radius, relative_pos_max_distance, bool(use_hard_g2l_mask),
          bool(use_hard_l2g_mask))
      return validation.finish(result, unbatched)

    result = _multihop_core(
        long_segments=long_segments,
        global_segments=global_segments,
        long_input_mask=long_input_mask,
        global_input_mask=global_input_mask,
        long_paragraph_ids=t["long_paragraph_ids"],
        long_sentence_ids=t["long_sentence_ids"],
        local_radius=local_radius,
        relative_pos_max_distance=relative_pos_max_distance,
        use_hard_g2l_mask=bool(use_hard_g2l_mask),
        ignore_hard_g2l_mask=t.get("ignore_hard_g2l_mask"),
        use_hard_l2g_mask=bool(use_hard_l2g_mask),
        ignore_hard_l2g_mask=t.get("ignore_hard_l2g_mask"),
        l2g_linked_ids=t.get("l2g_linked_ids"))
  return validation.finish(result, unbatched)


def _multihop_core(long_segments, global_segments, long_input_mask,
                   global_input_mask, long_paragraph_ids, long_sentence_ids,
                   local_radius, relative_pos_max_distance, use_hard_g2l_mask,
                   ignore_hard_g2l_mask, use_hard_l2g_mask,
                   ignore_hard_l2g_mask, l2g_linked_ids) -> SideInputs:
  """Structured multi-hop side inputs from batched int32 tensors."""
  global_len = validation.dim(global_segments, 1)

  # Local attention stays inside a long paragraph; everything else only
  # separates real tokens from padding.
  l2l_att_mask, g2g_att_mask, l2g_att_mask, g2l_att_mask = soft_masks(
      long_segments, long_input_mask, global_input_mask, local_radius)

  # A long token belongs to its sentence token and to its paragraph token.
  belongs = tf.logical_or(links(long_sentence_ids, global_len),
                          links(long_paragraph_ids, global_len))

  if use_hard_g2l_mask:
    hard = tf.transpose(belongs, [0, 2, 1])
    if ignore_hard_g2l_mask is not None:
      # Exempt global tokens (e.g. CLS) see every real long token.
      hard = tf.logical_or(
          hard, tf.equal(ignore_hard_g2l_mask, 1)[:, :, tf.newaxis])
    g2l_att_mask *= tf.cast(hard, tf.int32)
  if use_hard_l2g_mask:
    hard = belongs
    if ignore_hard_l2g_mask is not None:
      hard = tf.logical_or(
          hard, tf.equal(ignore_hard_l2g_mask, 1)[:, :, tf.newaxis])
    l2g_att_mask *= tf.cast(hard, tf.int32)

  own = belongs
  if l2g_linked_ids is not None:
    own = tf.logical_or(own, links(l2g_linked_ids, global_len))
  return assemble(l2l_att_mask, g2g_att_mask, l2g_att_mask, g2l_att_mask,
                  own, global_segments, local_radius,
                  relative_pos_max_distance,
                  (long_segments.shape[0], long_segments.shape[1],
                   global_segments.shape[1]))
