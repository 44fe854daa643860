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

import numpy as np
import tensorflow as tf

from etc_realformer.features import masks
from etc_realformer.features import relative_positions as rp

SIDE_INPUT_KEYS: Tuple[str, ...] = (
    "l2l_att_mask", "g2g_att_mask", "l2g_att_mask", "g2l_att_mask",
    "l2l_relative_att_ids", "g2g_relative_att_ids", "l2g_relative_att_ids",
    "g2l_relative_att_ids")

SideInputs = Dict[str, Optional[tf.Tensor]]


# ---------------------------------------------------------------- validation
def _check_int(name: str, value: Any, minimum: int) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"{name} must be a Python int, got {value!r}")
  if value < minimum:
    raise ValueError(f"{name} must be >= {minimum}, got {value}")
  return int(value)


def _to_int32(name: str, value: Any) -> tf.Tensor:
  """Converts to an int32 tensor; rejects float and string inputs."""
  try:
    tensor = tf.convert_to_tensor(value)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{name}: cannot convert to a tensor: {e}") from e
  if not (tensor.dtype.is_integer or tensor.dtype == tf.bool):
    raise ValueError(f"{name} must have an integer dtype, got {tensor.dtype}")
  return tf.cast(tensor, tf.int32)


def _prepare(long_args: Mapping[str, Any],
             global_args: Mapping[str, Any]) -> Tuple[Dict[str, tf.Tensor],
                                                      bool]:
  """Converts, checks ranks/lengths, and adds a batch axis when unbatched.

  Args:
    long_args: name -> value of the arguments shaped [B, L] (or [L]); None
      values are skipped.
    global_args: name -> value of the arguments shaped [B, G] (or [G]).

  Returns:
    (name -> <int32>[B, ...] tensor, whether the inputs were unbatched).
  """
  tensors = {}
  ranks = {}
  for group in (long_args, global_args):
    for name, value in group.items():
      if value is None:
        continue
      tensor = _to_int32(name, value)
      rank = tensor.shape.rank
      if rank not in (1, 2):
        raise ValueError(
            f"{name} must have rank 2 [batch, length] or rank 1 [length], "
            f"got shape {tensor.shape}")
      tensors[name] = tensor
      ranks[name] = rank
  first = next(iter(ranks))
  for name, rank in ranks.items():
    if rank != ranks[first]:
      raise ValueError(
          f"{name} has rank {rank} but {first} has rank {ranks[first]}: "
          f"pass all inputs batched or all unbatched")
  unbatched = ranks[first] == 1
  if unbatched:
    tensors = {k: v[tf.newaxis] for k, v in tensors.items()}

  def check_same(names, axis, what):
    known = [(n, tensors[n].shape[axis]) for n in names if n in tensors]
    known = [(n, d) for n, d in known if d is not None]
    for name, dim in known[1:]:
      if dim != known[0][1]:
        raise ValueError(
            f"{name} has {what} {dim} but {known[0][0]} has {what} "
            f"{known[0][1]}")

  check_same(list(tensors), 0, "batch size")
  check_same(list(long_args), 1, "long length")
  check_same(list(global_args), 1, "global length")
  return tensors, unbatched


def _static_values(tensor: tf.Tensor) -> Optional[np.ndarray]:
  """The tensor's values if known at trace time (eager or constant), else None."""
  try:
    return tf.get_static_value(tensor)
  except (TypeError, ValueError, NotImplementedError):
    return None


def _check_binary(name: str, tensor: tf.Tensor) -> None:
  values = _static_values(tensor)
  if values is not None and not np.isin(values, (0, 1)).all():
    raise ValueError(f"{name} must hold only 0 and 1, got values "
                     f"{sorted(set(np.unique(values).tolist()))[:8]}")


def _check_ids_in_range(name: str, ids: tf.Tensor, real: tf.Tensor,
                        low: int, global_len: Optional[int],
                        real_from_breakpoints: bool = False) -> None:
  """Checks `low <= ids < G` at real (non-padding) tokens when all is static.

  `real` is nonzero at real tokens, or, with `real_from_breakpoints`, holds
  end-of-example breakpoints (real = before or at the last 1).
  """
  if global_len is None:
    return
  values = _static_values(ids)
  real_values = _static_values(real)
  if values is None or real_values is None:
    return
  if real_from_breakpoints:
    # Reverse cumsum in NumPy: in graph mode the TF cumsum has no static value.
    real_values = np.cumsum(real_values[..., ::-1], axis=-1)[..., ::-1]
  selected = values[real_values != 0]
  bad = selected[(selected < low) | (selected >= global_len)]
  if bad.size:
    raise ValueError(
        f"{name} must lie in [{low}, {global_len}) (the global length) at "
        f"non-padding tokens, got {sorted(set(bad.tolist()))[:8]}")


def _dim(tensor: tf.Tensor, axis: int):
  """Static dimension when known, else the dynamic one."""
  static = tensor.shape[axis]
  return static if static is not None else tf.shape(tensor)[axis]


def _finish(side_inputs: SideInputs, unbatched: bool) -> SideInputs:
  if unbatched:
    return {k: (None if v is None else v[0]) for k, v in side_inputs.items()}
  return side_inputs


def drop_none_values(side_inputs: Mapping[str, Any]) -> Dict[str, Any]:
  """The same dict without the None entries (e.g. ids when M = 0)."""
  return {k: v for k, v in side_inputs.items() if v is not None}


# -------------------------------------------------------------- core builder
def _global_local_core(long_example_ids: tf.Tensor,
                       global_example_ids: tf.Tensor,
                       sentence_ids: tf.Tensor,
                       local_radius: int,
                       relative_pos_max_distance: int,
                       use_hard_g2l_mask: bool,
                       use_hard_l2g_mask: bool) -> SideInputs:
  """Side inputs from batched int32 example ids (no argument checks)."""
  batch_size = _dim(long_example_ids, 0)
  long_len = _dim(long_example_ids, 1)
  global_len = _dim(global_example_ids, 1)
  static_b = long_example_ids.shape[0]
  static_l = long_example_ids.shape[1]
  static_g = global_example_ids.shape[1]

  l2l_att_mask = masks.make_local_segmented_att_mask(long_example_ids,
                                                     local_radius)
  g2g_att_mask = masks.make_segmented_att_mask(global_example_ids)
  l2g_att_mask = masks.make_cross_segmented_att_mask(long_example_ids,
                                                     global_example_ids)
  # g2l starts as the transpose of the *soft* l2g mask: the hard masks are
  # applied to each direction independently.
  g2l_att_mask = tf.transpose(l2g_att_mask, [0, 2, 1])

  # [B, L, G]: 1 where global token g is long token i's sentence.
  global_range = tf.range(global_len, dtype=tf.int32)
  own_sentence = tf.cast(
      tf.equal(sentence_ids[:, :, tf.newaxis],
               global_range[tf.newaxis, tf.newaxis, :]), tf.int32)
  if use_hard_g2l_mask:
    g2l_att_mask *= tf.transpose(own_sentence, [0, 2, 1])
  if use_hard_l2g_mask:
    l2g_att_mask *= own_sentence

  result = dict(
      l2l_att_mask=l2l_att_mask,
      g2g_att_mask=g2g_att_mask,
      l2g_att_mask=l2g_att_mask,
      g2l_att_mask=g2l_att_mask,
      l2l_relative_att_ids=None,
      g2g_relative_att_ids=None,
      l2g_relative_att_ids=None,
      g2l_relative_att_ids=None)
  if relative_pos_max_distance > 0:
    m = relative_pos_max_distance
    result["l2l_relative_att_ids"] = rp.make_local_relative_att_ids(
        long_len, local_radius, m, batch_size)
    result["g2g_relative_att_ids"] = rp.make_relative_att_ids(
        global_len, m, batch_size)
    # l2l and l2g share one softmax (and one relative table), so the l2g ids
    # start after the 2M+1 distance ids; same for g2g/g2l.
    l2g_ids = own_sentence + rp.other_sentence_id(m)
    result["l2g_relative_att_ids"] = l2g_ids
    result["g2l_relative_att_ids"] = tf.transpose(l2g_ids, [0, 2, 1])
  _set_static_shapes(result, static_b, static_l, static_g, local_radius)
  return result


def _set_static_shapes(side_inputs: SideInputs, batch, long_len, global_len,
                       local_radius: int) -> None:
  shapes = dict(
      l2l=[batch, long_len, 2 * local_radius + 1],
      g2g=[batch, global_len, global_len],
      l2g=[batch, long_len, global_len],
      g2l=[batch, global_len, long_len])
  for key, value in side_inputs.items():
    if value is not None:
      value.set_shape(shapes[key[:3]])


# ---------------------------------------------------------------- public API
def make_global_local_side_inputs_from_example_ids(
    long_example_ids,
    global_example_ids,
    sentence_ids,
    local_radius: int,
    relative_pos_max_distance: int,
    use_hard_g2l_mask: bool = False,
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
  local_radius = _check_int("local_radius", local_radius, 1)
  relative_pos_max_distance = _check_int("relative_pos_max_distance",
                                         relative_pos_max_distance, 0)
  t, unbatched = _prepare(
      dict(long_example_ids=long_example_ids, sentence_ids=sentence_ids),
      dict(global_example_ids=global_example_ids))
  _check_ids_in_range("sentence_ids", t["sentence_ids"],
                      t["long_example_ids"], 0,
                      t["global_example_ids"].shape[1])
  with tf.name_scope("make_global_local_side_inputs"):
    result = _global_local_core(t["long_example_ids"], t["global_example_ids"],
                                t["sentence_ids"], local_radius,
                                relative_pos_max_distance,
                                bool(use_hard_g2l_mask),
                                bool(use_hard_l2g_mask))
  return _finish(result, unbatched)


def make_global_local_side_inputs(
    long_breakpoints,
    global_breakpoints,
    sentence_ids,
    local_radius: int,
    relative_pos_max_distance: int,
    use_hard_g2l_mask: bool = False,
    use_hard_l2g_mask: bool = False) -> SideInputs:
  """Side inputs from end-of-example breakpoints (the ETC pre-training format).

  A breakpoint 1 marks the last token of each packed example (exactly one 1
  when not packing); tokens after the last breakpoint are padding. Example
  ids are the reverse cumulative sums, so padding gets id 0 on both sides.

  Args:
    long_breakpoints: <int>[B, L] zeros and ones.
    global_breakpoints: <int>[B, G] zeros and ones.
    sentence_ids: <int>[B, L] global token index of every long token, in
      [0, G) for non-padding tokens (padding: any value).
    local_radius: `r` >= 1, the l2l window half-width.
    relative_pos_max_distance: `M` >= 0; 0 skips relative ids (None values).
    use_hard_g2l_mask: If True, a global token sees only the long tokens of
      its own sentence.
    use_hard_l2g_mask: If True, a long token sees only its own global token.

  Returns:
    Dict with the eight `SIDE_INPUT_KEYS` (see
    `make_global_local_side_inputs_from_example_ids`).

  Raises:
    ValueError: as `make_global_local_side_inputs_from_example_ids`, and when
      a breakpoint tensor holds values other than 0 and 1.
  """
  local_radius = _check_int("local_radius", local_radius, 1)
  relative_pos_max_distance = _check_int("relative_pos_max_distance",
                                         relative_pos_max_distance, 0)
  t, unbatched = _prepare(
      dict(long_breakpoints=long_breakpoints, sentence_ids=sentence_ids),
      dict(global_breakpoints=global_breakpoints))
  _check_binary("long_breakpoints", t["long_breakpoints"])
  _check_binary("global_breakpoints", t["global_breakpoints"])
  with tf.name_scope("make_global_local_side_inputs"):
    long_example_ids = masks.example_ids_from_breakpoints(
        t["long_breakpoints"])
    global_example_ids = masks.example_ids_from_breakpoints(
        t["global_breakpoints"])
    _check_ids_in_range("sentence_ids", t["sentence_ids"],
                        t["long_breakpoints"], 0,
                        t["global_breakpoints"].shape[1],
                        real_from_breakpoints=True)
    result = _global_local_core(long_example_ids, global_example_ids,
                                t["sentence_ids"], local_radius,
                                relative_pos_max_distance,
                                bool(use_hard_g2l_mask),
                                bool(use_hard_l2g_mask))
  return _finish(result, unbatched)


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
  local_radius = _check_int("local_radius", local_radius, 1)
  relative_pos_max_distance = _check_int("relative_pos_max_distance",
                                         relative_pos_max_distance, 0)
  t, unbatched = _prepare(
      dict(long_paragraph_breakpoints=long_paragraph_breakpoints,
           long_paragraph_ids=long_paragraph_ids,
           long_sentence_ids=long_sentence_ids,
           ignore_hard_l2g_mask=ignore_hard_l2g_mask,
           l2g_linked_ids=l2g_linked_ids),
      dict(global_paragraph_breakpoints=global_paragraph_breakpoints,
           ignore_hard_g2l_mask=ignore_hard_g2l_mask))
  _check_binary("long_paragraph_breakpoints", t["long_paragraph_breakpoints"])
  _check_binary("global_paragraph_breakpoints",
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
        _check_ids_in_range(name, t[name], t["long_paragraph_breakpoints"],
                            -1, global_static_len,
                            real_from_breakpoints=True)

    if flat_sequence:
      # No structure beyond sentences: the plain ETC pattern over the masks.
      result = _global_local_core(long_input_mask, global_input_mask,
                                  t["long_sentence_ids"], local_radius,
                                  relative_pos_max_distance,
                                  bool(use_hard_g2l_mask),
                                  bool(use_hard_l2g_mask))
      return _finish(result, unbatched)

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
  return _finish(result, unbatched)


def _multihop_core(long_segments, global_segments, long_input_mask,
                   global_input_mask, long_paragraph_ids, long_sentence_ids,
                   local_radius, relative_pos_max_distance, use_hard_g2l_mask,
                   ignore_hard_g2l_mask, use_hard_l2g_mask,
                   ignore_hard_l2g_mask, l2g_linked_ids) -> SideInputs:
  """Structured multi-hop side inputs from batched int32 tensors."""
  batch_size = _dim(long_segments, 0)
  long_len = _dim(long_segments, 1)
  global_len = _dim(global_segments, 1)

  # Local attention stays inside a long paragraph.
  l2l_att_mask = masks.make_local_segmented_att_mask(long_segments,
                                                     local_radius)
  # Everything else only separates real tokens from padding.
  g2g_att_mask = masks.make_segmented_att_mask(global_input_mask)
  l2g_att_mask = masks.make_cross_segmented_att_mask(long_input_mask,
                                                     global_input_mask)
  g2l_att_mask = tf.transpose(l2g_att_mask, [0, 2, 1])

  global_range = tf.range(global_len, dtype=tf.int32)

  def links(long_ids):
    # [B, L, G]: global token g is named by long_ids[b, i].
    return tf.equal(long_ids[:, :, tf.newaxis],
                    global_range[tf.newaxis, tf.newaxis, :])

  # A long token belongs to its sentence token and to its paragraph token.
  belongs = tf.logical_or(links(long_sentence_ids), links(long_paragraph_ids))

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

  result = dict(
      l2l_att_mask=l2l_att_mask,
      g2g_att_mask=g2g_att_mask,
      l2g_att_mask=l2g_att_mask,
      g2l_att_mask=g2l_att_mask,
      l2l_relative_att_ids=None,
      g2g_relative_att_ids=None,
      l2g_relative_att_ids=None,
      g2l_relative_att_ids=None)
  if relative_pos_max_distance > 0:
    m = relative_pos_max_distance
    result["l2l_relative_att_ids"] = rp.make_local_relative_att_ids(
        long_len, local_radius, m, batch_size)
    own = belongs
    if l2g_linked_ids is not None:
      own = tf.logical_or(own, links(l2g_linked_ids))
    l2g_ids = tf.cast(own, tf.int32) + rp.other_sentence_id(m)
    result["l2g_relative_att_ids"] = l2g_ids
    result["g2l_relative_att_ids"] = tf.transpose(l2g_ids, [0, 2, 1])
    result["g2g_relative_att_ids"] = (
        rp.overwrite_relative_att_ids_outside_segments(
            rp.make_relative_att_ids(global_len, m, batch_size),
            global_segments, rp.cross_paragraph_id(m)))
  _set_static_shapes(result, long_segments.shape[0], long_segments.shape[1],
                     global_segments.shape[1], local_radius)
  return result


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
  num_tokens_per_block = _check_int("num_tokens_per_block",
                                    num_tokens_per_block, 1)
  local_radius = _check_int("local_radius", local_radius, 1)
  relative_pos_max_distance = _check_int("relative_pos_max_distance",
                                         relative_pos_max_distance, 0)
  global_token_id = _check_int("global_token_id", global_token_id, 0)
  t, unbatched = _prepare(dict(input_mask=input_mask), {})
  input_mask = t["input_mask"]

  with tf.name_scope("make_fixed_block_side_inputs"):
    batch_size = _dim(input_mask, 0)
    long_len = _dim(input_mask, 1)
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

    side_inputs = _global_local_core(input_mask, global_input_mask,
                                     sentence_ids, local_radius,
                                     relative_pos_max_distance,
                                     bool(use_hard_g2l_mask),
                                     bool(use_hard_l2g_mask))
    global_inputs = dict(
        global_token_ids=global_token_id * global_input_mask,
        global_input_mask=global_input_mask,
        global_breakpoints=masks.breakpoints_from_input_mask(
            global_input_mask),
        sentence_ids=sentence_ids)
  return _finish(side_inputs, unbatched), _finish(global_inputs, unbatched)


def add_side_input_features(config, features: Mapping[str, Any]
                           ) -> Dict[str, Any]:
  """Adds the side inputs to a feature dict (for `tf.data.Dataset.map`).

  Args:
    config: An `EtcConfig` (reads `local_radius`,
      `relative_pos_max_distance`, `use_hard_g2l_mask`, `use_hard_l2g_mask`).
    features: Dict holding `long_breakpoints`, `global_breakpoints` and
      `sentence_ids` (batched or not).

  Returns:
    A new dict: `features` plus the side inputs, without None entries.
  """
  for key in ("long_breakpoints", "global_breakpoints", "sentence_ids"):
    if key not in features:
      raise ValueError(f"features: missing {key!r}")
  side_inputs = make_global_local_side_inputs(
      long_breakpoints=features["long_breakpoints"],
      global_breakpoints=features["global_breakpoints"],
      sentence_ids=features["sentence_ids"],
      local_radius=config.local_radius,
      relative_pos_max_distance=config.relative_pos_max_distance,
      use_hard_g2l_mask=config.use_hard_g2l_mask,
      use_hard_l2g_mask=config.use_hard_l2g_mask)
  result = dict(features)
  result.update(drop_none_values(side_inputs))
  return result
