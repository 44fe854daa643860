"""ETC side inputs: the attention masks and relative position ids.

The global-local encoder takes eight side inputs besides the token ids:

  * `l2l_att_mask`, `l2l_relative_att_ids`: <int32>[B, L, 2r + 1], the long
    sliding window; slot j of row i is long position i - r + j.
  * `g2g_att_mask`, `g2g_relative_att_ids`: <int32>[B, G, G].
  * `l2g_att_mask`, `l2g_relative_att_ids`: <int32>[B, L, G].
  * `g2l_att_mask`, `g2l_relative_att_ids`: <int32>[B, G, L].

Masks hold 1 where a query may attend a key. Relative ids (M =
`relative_pos_max_distance`) follow `relative_positions`: 0..2M for distances,
2M+1 (other sentence) and 2M+2 (own sentence) for l2g/g2l, and, in the
multi-hop variant, 2M+3 for g2g pairs in different paragraphs. Everything here
reproduces the original ETC feature code exactly (see `tests/`).

The multi-hop variant (paragraph structure, WikiHop and HotpotQA) is in
`multihop`; `side_input_sources.from_features` builds the side inputs of a
task's raw features by its source, the one place the tasks call.

When `relative_pos_max_distance` is 0 the four `*_relative_att_ids` entries
are present with value None (as in the original); the model then adds no
relative term. `tf.data` carries None values through `map` (as
`NoneTensorSpec`); `drop_none_values` removes them where a consumer wants only
tensors (e.g. Keras `fit` inputs).

Every builder accepts NumPy arrays or tensors of any integer (or bool) dtype,
batched (`[B, L]`, `[B, G]`) or unbatched (`[L]`, `[G]`; the outputs are then
unbatched too), eagerly, inside `tf.function` (also with `jit_compile=True`)
and inside `tf.data.Dataset.map`. Static lengths carry over to the outputs.
Invalid arguments raise `ValueError` naming the argument; value checks (e.g.
sentence ids in range) run whenever the values are known when the op is built
(eager tensors, NumPy arrays, constants).
"""

from typing import Any, Dict, Mapping, Optional, Tuple

import tensorflow as tf

from etc_realformer.features import masks
from etc_realformer.features import relative_positions as rp
from etc_realformer.features import validation
from etc_realformer.features.validation import SideInputs

SIDE_INPUT_KEYS: Tuple[str, ...] = (
    "l2l_att_mask", "g2g_att_mask", "l2g_att_mask", "g2l_att_mask",
    "l2l_relative_att_ids", "g2g_relative_att_ids", "l2g_relative_att_ids",
    "g2l_relative_att_ids")


# -------------------------------------------------------------- core builder
def links(long_ids: tf.Tensor, global_len) -> tf.Tensor:
  """<bool>[B, L, G]: global token g is the one `long_ids[b, i]` names."""
  global_range = tf.range(global_len, dtype=tf.int32)
  return tf.equal(long_ids[:, :, tf.newaxis],
                  global_range[tf.newaxis, tf.newaxis, :])


def assemble(l2l_att_mask: tf.Tensor, g2g_att_mask: tf.Tensor,
             l2g_att_mask: tf.Tensor, g2l_att_mask: tf.Tensor,
             own: tf.Tensor, g2g_segments: Optional[tf.Tensor],
             local_radius: int, relative_pos_max_distance: int,
             static_shape: Tuple[Any, Any, Any]) -> SideInputs:
  """The eight side inputs from the four masks and the "own" relation.

  Args:
    l2l_att_mask .. g2l_att_mask: <int32> masks.
    own: <bool>[B, L, G], global token g is long token i's own (sentence,
      paragraph, linked): its l2g/g2l pairs get the own-sentence id, the
      others the other-sentence id.
    g2g_segments: <int32>[B, G] segments of the global input; g2g pairs
      across segments get the cross-paragraph id (None: no such id).
    local_radius, relative_pos_max_distance: r and M (0: ids are None).
    static_shape: (B, L, G), static where known.
  """
  batch, long_len, global_len = static_shape
  dyn_batch = validation.dim(l2l_att_mask, 0)
  dyn_long = validation.dim(l2l_att_mask, 1)
  dyn_global = validation.dim(g2g_att_mask, 1)
  masks = {"l2l": l2l_att_mask, "g2g": g2g_att_mask, "l2g": l2g_att_mask,
           "g2l": g2l_att_mask}
  ids = dict.fromkeys(masks)  # None: no relative ids
  if relative_pos_max_distance > 0:
    m = relative_pos_max_distance
    ids["l2l"] = rp.make_local_relative_att_ids(dyn_long, local_radius, m,
                                                dyn_batch)
    ids["g2g"] = rp.make_relative_att_ids(dyn_global, m, dyn_batch)
    if g2g_segments is not None:
      ids["g2g"] = rp.overwrite_relative_att_ids_outside_segments(
          ids["g2g"], g2g_segments, rp.cross_paragraph_id(m))
    # l2l and l2g share one softmax (and one relative table), so the l2g ids
    # start after the 2M+1 distance ids; same for g2g/g2l.
    ids["l2g"] = tf.cast(own, tf.int32) + rp.other_sentence_id(m)
    ids["g2l"] = tf.transpose(ids["l2g"], [0, 2, 1])
  shapes = {"l2l": [batch, long_len, 2 * local_radius + 1],
            "g2g": [batch, global_len, global_len],
            "l2g": [batch, long_len, global_len],
            "g2l": [batch, global_len, long_len]}
  for pattern in masks:
    for value in (masks[pattern], ids[pattern]):
      if value is not None:
        value.set_shape(shapes[pattern])
  result = {f"{p}_att_mask": value for p, value in masks.items()}
  result.update({f"{p}_relative_att_ids": value for p, value in ids.items()})
  return result


def soft_masks(local_segments: tf.Tensor, long_ids: tf.Tensor,
               global_ids: tf.Tensor, local_radius: int
               ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
  """The four masks before any hard masking: l2l inside the window and
  inside `local_segments`, g2g / l2g / g2l between equal ids.

  g2l is the transpose of the *soft* l2g mask: the hard masks are applied to
  each direction independently.
  """
  l2l_att_mask = masks.make_local_segmented_att_mask(local_segments,
                                                     local_radius)
  g2g_att_mask = masks.make_segmented_att_mask(global_ids)
  l2g_att_mask = masks.make_cross_segmented_att_mask(long_ids, global_ids)
  return (l2l_att_mask, g2g_att_mask, l2g_att_mask,
          tf.transpose(l2g_att_mask, [0, 2, 1]))


def global_local_core(long_example_ids: tf.Tensor,
                      global_example_ids: tf.Tensor,
                      sentence_ids: tf.Tensor,
                      local_radius: int,
                      relative_pos_max_distance: int,
                      use_hard_g2l_mask: bool,
                      use_hard_l2g_mask: bool) -> SideInputs:
  """Side inputs from batched int32 example ids (no argument checks)."""
  l2l_att_mask, g2g_att_mask, l2g_att_mask, g2l_att_mask = soft_masks(
      long_example_ids, long_example_ids, global_example_ids, local_radius)

  # [B, L, G]: global token g is long token i's sentence.
  own_sentence = links(sentence_ids, validation.dim(global_example_ids, 1))
  if use_hard_g2l_mask:
    g2l_att_mask *= tf.cast(tf.transpose(own_sentence, [0, 2, 1]), tf.int32)
  if use_hard_l2g_mask:
    l2g_att_mask *= tf.cast(own_sentence, tf.int32)
  return assemble(l2l_att_mask, g2g_att_mask, l2g_att_mask, g2l_att_mask,
                  own_sentence, None, local_radius,
                  relative_pos_max_distance,
                  (long_example_ids.shape[0], long_example_ids.shape[1],
                   global_example_ids.shape[1]))


# ---------------------------------------------------------------- public API
def make_global_local_side_inputs_from_example_ids(
    long_example_ids, global_example_ids, sentence_ids, local_radius: int,
    relative_pos_max_distance: int, use_hard_g2l_mask: bool = False,
    use_hard_l2g_mask: bool = False) -> SideInputs:
  """Side inputs from per-token example ids (packed examples or input masks).

  Tokens attend only within their example: l2l (inside the window), g2g, l2g
  and g2l all require equal example ids. Without packing, a BERT input mask
  (1 = token, 0 = padding) serves as both example id tensors. Padding must
  use an id of its own; the sentence-id range check treats example id 0 as
  padding.

  Args:
    long_example_ids: <int>[B, L] example id of every long token.
    global_example_ids: <int>[B, G] example id of every global token.
    sentence_ids: <int>[B, L] index of the global token ("sentence") each long
      token belongs to, in [0, G) for non-padding tokens (padding: any value).
    local_radius: `r` >= 1, the l2l window half-width.
    relative_pos_max_distance: `M` >= 0; 0 skips relative ids (None values).
    use_hard_g2l_mask: If True, a global token sees only the long tokens of
      its own sentence.
    use_hard_l2g_mask: If True, a long token sees only its own global token.

  Returns:
    Dict with the eight `SIDE_INPUT_KEYS`: <int32> masks/ids of shapes
    [B, L, 2r+1] (l2l), [B, G, G] (g2g), [B, L, G] (l2g), [B, G, L] (g2l);
    the ids are None when M is 0. Unbatched inputs give unbatched outputs.

  Raises:
    ValueError: on bad ranks, dtypes, mismatched shapes, `local_radius` < 1,
      negative `relative_pos_max_distance`, or sentence ids out of range.
  """
  return _checked_global_local(
      "example_ids", long_example_ids, global_example_ids, sentence_ids,
      local_radius, relative_pos_max_distance, use_hard_g2l_mask,
      use_hard_l2g_mask)


def make_global_local_side_inputs(
    long_breakpoints, global_breakpoints, sentence_ids, local_radius: int,
    relative_pos_max_distance: int, use_hard_g2l_mask: bool = False,
    use_hard_l2g_mask: bool = False) -> SideInputs:
  """Side inputs from end-of-example breakpoints (the ETC pre-training format).

  A breakpoint 1 marks the last token of each packed example (exactly one 1
  when not packing); tokens after the last breakpoint are padding. Example
  ids are the reverse cumulative sums, so padding gets id 0 on both sides.

  Args:
    long_breakpoints: <int>[B, L] zeros and ones.
    global_breakpoints: <int>[B, G] zeros and ones.
    sentence_ids, local_radius, relative_pos_max_distance, use_hard_g2l_mask,
      use_hard_l2g_mask: as `make_global_local_side_inputs_from_example_ids`.

  Returns:
    Dict with the eight `SIDE_INPUT_KEYS` (see
    `make_global_local_side_inputs_from_example_ids`).

  Raises:
    ValueError: as `make_global_local_side_inputs_from_example_ids`, and when
      a breakpoint tensor holds values other than 0 and 1.
  """
  return _checked_global_local(
      "breakpoints", long_breakpoints, global_breakpoints, sentence_ids,
      local_radius, relative_pos_max_distance, use_hard_g2l_mask,
      use_hard_l2g_mask)


def _checked_global_local(kind: str, long_ids, global_ids, sentence_ids,
                          local_radius, relative_pos_max_distance,
                          use_hard_g2l_mask, use_hard_l2g_mask) -> SideInputs:
  """The two public global-local builders: checks the arguments (errors name
  them `long_<kind>` / `global_<kind>`), then `global_local_core`.

  `kind` is "example_ids", or "breakpoints" (0/1 end-of-example breakpoints,
  turned into example ids here).
  """
  long_name, global_name = f"long_{kind}", f"global_{kind}"
  breakpoints = kind == "breakpoints"
  local_radius, relative_pos_max_distance = (
      validation.check_radius_and_distance(local_radius,
                                           relative_pos_max_distance))
  t, unbatched = validation.prepare(
      {long_name: long_ids, "sentence_ids": sentence_ids},
      {global_name: global_ids})
  long_ids, global_ids = t[long_name], t[global_name]
  if breakpoints:
    validation.check_binary(long_name, long_ids)
    validation.check_binary(global_name, global_ids)
  validation.check_ids_in_range("sentence_ids", t["sentence_ids"], long_ids,
                                0, global_ids.shape[1],
                                real_from_breakpoints=breakpoints)
  with tf.name_scope("make_global_local_side_inputs"):
    if breakpoints:
      long_ids = masks.example_ids_from_breakpoints(long_ids)
      global_ids = masks.example_ids_from_breakpoints(global_ids)
    result = global_local_core(
        long_ids, global_ids, t["sentence_ids"], local_radius,
        relative_pos_max_distance, bool(use_hard_g2l_mask),
        bool(use_hard_l2g_mask))
  return validation.finish(result, unbatched)


def make_fixed_block_side_inputs(
    input_mask,
    num_tokens_per_block: int,
    local_radius: int,
    relative_pos_max_distance: int,
    use_hard_g2l_mask: bool = False,
    use_hard_l2g_mask: bool = False,
    global_token_id: int = 1) -> Tuple[SideInputs, Dict[str, tf.Tensor]]:
  """Side inputs and global input for "fixed blocks" of long tokens.

  Every `num_tokens_per_block` consecutive long tokens get one global token,
  so G = ceil(L / num_tokens_per_block); a global token is real if its block
  holds at least one real long token. The input mask serves directly as the
  long example ids and the global input mask as the global example ids.

  Args:
    input_mask: <int>[B, L] BERT-style mask, 1 for tokens, 0 for padding.
    num_tokens_per_block: Long tokens per global token (>= 1).
    local_radius: `r` >= 1.
    relative_pos_max_distance: `M` >= 0; 0 skips relative ids (None values).
    use_hard_g2l_mask: If True, a global token sees only its own block.
    use_hard_l2g_mask: If True, a long token sees only its block's token.
    global_token_id: Token id of every real global token (padding gets 0);
      ETC pre-training used 1.

  Returns:
    side_inputs: the eight `SIDE_INPUT_KEYS` (G = ceil(L / block size)).
    global_inputs: dict with
      `global_token_ids` <int32>[B, G] (`global_token_id` * mask),
      `global_input_mask` <int32>[B, G],
      `global_breakpoints` <int32>[B, G] (1 at each real global token that
        is followed by padding or the end),
      `sentence_ids` <int32>[B, L] (`i // num_tokens_per_block`).

  Raises:
    ValueError: on bad rank or dtype of `input_mask`, or bad integers.
  """
  num_tokens_per_block = validation.check_int("num_tokens_per_block",
                                    num_tokens_per_block, 1)
  local_radius, relative_pos_max_distance = (
      validation.check_radius_and_distance(local_radius,
                                           relative_pos_max_distance))
  global_token_id = validation.check_int("global_token_id", global_token_id, 0)
  t, unbatched = validation.prepare(dict(input_mask=input_mask), {})
  input_mask = t["input_mask"]

  with tf.name_scope("make_fixed_block_side_inputs"):
    batch_size = validation.dim(input_mask, 0)
    long_len = validation.dim(input_mask, 1)
    static_l = input_mask.shape[1]
    n = num_tokens_per_block
    global_len = (long_len + n - 1) // n
    # Zero-pad the last block, then a block is real if any token in it is.
    padded = tf.pad(input_mask, [[0, 0], [0, global_len * n - long_len]])
    blocked = tf.reshape(padded, [batch_size, global_len, n])
    global_input_mask = tf.minimum(tf.reduce_max(blocked, axis=-1), 1)
    static_g = None if static_l is None else (static_l + n - 1) // n
    global_input_mask.set_shape([input_mask.shape[0], static_g])

    sentence_ids = tf.range(long_len, dtype=tf.int32) // n
    sentence_ids = tf.broadcast_to(sentence_ids[tf.newaxis],
                                   [batch_size, long_len])
    sentence_ids.set_shape(input_mask.shape)

    side_inputs = global_local_core(
        input_mask, global_input_mask, sentence_ids, local_radius,
        relative_pos_max_distance, bool(use_hard_g2l_mask),
        bool(use_hard_l2g_mask))
    global_inputs = dict(
        global_token_ids=global_token_id * global_input_mask,
        global_input_mask=global_input_mask,
        global_breakpoints=masks.breakpoints_from_input_mask(
            global_input_mask),
        sentence_ids=sentence_ids)
  return (validation.finish(side_inputs, unbatched),
          validation.finish(global_inputs, unbatched))


def drop_none_values(side_inputs: Mapping[str, Any]) -> Dict[str, Any]:
  """The same dict without the None entries (e.g. ids when M = 0)."""
  return {k: v for k, v in side_inputs.items() if v is not None}
