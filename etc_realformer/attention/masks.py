"""The eight side inputs turned into what one attention layer consumes.

The encoder takes its masks and relative ids in the window layout (l2l) and
the dense layouts (l2g, g2g, g2l); see `etc_realformer.features`. Once per
forward pass, `prepare_side_inputs` turns the masks into additive terms
(-10000 where masked, as the original) in the layout of the chosen attention
path, finds the queries that can attend to nothing, and moves the l2l ids
into the dense layout when the path is dense. Every layer then shares them.
"""

from typing import Mapping, NamedTuple, Optional

import tensorflow as tf

from etc_realformer.attention import blocking
from etc_realformer.attention.pieces import BranchMasks
from etc_realformer.attention.pieces import PatternPair

# Added to the logits of masked keys, as in the original ETC (not -inf: a fully
# masked row must stay finite; -10000 is representable in float16).
MASK_ADDER = -10000.0


class PreparedSideInputs(NamedTuple):
  """Side inputs turned into the layouts one attention layer consumes.

  Made once per forward pass by `prepare_side_inputs` and shared by all
  layers. `sparse` tells the layout of the long-query pieces:

  * sparse (b = r + 1, nb = ceil(L / b); `etc_realformer.attention.blocking`):
    l2l_adder <float32>[B, 1, nb, b, 3b] (the blocked band), l2g_adder
    [B, 1, nb, b, G], long_valid [B, 1, nb, b, 1]; l2l_ids <int32>
    [B, nb, b, 2r+1] (windows cut into query blocks), l2g_ids [B, nb, b, G].
  * full: l2l_adder [B, 1, L, L], l2g_adder [B, 1, L, G], long_valid
    [B, 1, L, 1]; l2l_ids [B, L, L], l2g_ids [B, L, G].

  Either way g2g_adder is [B, 1, G, G], g2l_adder [B, 1, G, L], global_valid
  [B, 1, G, 1], g2g_ids [B, G, G], g2l_ids [B, G, L]. The `*_valid` tensors
  are 1.0 for queries with at least one unmasked key. Ids are None where
  there is no relative term.
  """
  sparse: bool
  long_len: tf.Tensor
  l2l_adder: tf.Tensor
  l2g_adder: tf.Tensor
  g2g_adder: tf.Tensor
  g2l_adder: tf.Tensor
  long_valid: tf.Tensor
  global_valid: tf.Tensor
  l2l_ids: Optional[tf.Tensor]
  l2g_ids: Optional[tf.Tensor]
  g2g_ids: Optional[tf.Tensor]
  g2l_ids: Optional[tf.Tensor]

  def long_masks(self, relative: bool) -> BranchMasks[tf.Tensor]:
    """The long queries' masks (l2l, l2g); ids only when `relative` (the
    layer has relative tables)."""
    return BranchMasks(
        adders=PatternPair(self.l2l_adder, self.l2g_adder),
        valid=self.long_valid,
        ids=(PatternPair(self.l2l_ids, self.l2g_ids) if relative
             else PatternPair()))

  def global_masks(self, relative: bool) -> BranchMasks[tf.Tensor]:
    """The global queries' masks (g2g, g2l), as `long_masks`."""
    return BranchMasks(
        adders=PatternPair(self.g2g_adder, self.g2l_adder),
        valid=self.global_valid,
        ids=(PatternPair(self.g2g_ids, self.g2l_ids) if relative
             else PatternPair()))


def _adder(mask: tf.Tensor) -> tf.Tensor:
  return MASK_ADDER * (1.0 - tf.cast(mask, tf.float32))


def prepare_side_inputs(side_inputs: Mapping[str, Optional[tf.Tensor]],
                        batch_size, long_len: int, global_len: int,
                        local_radius: int, sparse: bool
                        ) -> PreparedSideInputs:
  """Converts the eight side inputs for `FusedGlobalLocalAttention`.

  Args:
    side_inputs: `l2l_att_mask` <int32>[B, L, 2r+1], `g2g_att_mask` [B, G, G],
      `l2g_att_mask` [B, L, G], `g2l_att_mask` [B, G, L] and the four
      `*_relative_att_ids` of the same shapes. A missing or None mask allows
      everything (l2l: everything inside the band); missing ids mean no
      relative term for that piece.
    batch_size: B (int or scalar tensor).
    long_len: L (static int).
    global_len: G (static int).
    local_radius: r.
    sparse: blocked (True) or dense (False) layout for l2l.

  Returns:
    A `PreparedSideInputs`.
  """
  r = local_radius
  window = 2 * r + 1

  def get(name):
    value = side_inputs.get(name)
    if value is None:
      return None
    return tf.convert_to_tensor(value)

  l2l_mask = get("l2l_att_mask")
  if l2l_mask is None:
    l2l_mask = tf.ones([batch_size, long_len, window], tf.int32)
  # Keys outside the sequence never count, whatever the caller's mask says.
  in_range = blocking.window_in_range_mask(long_len, r)
  l2l_mask = tf.cast(l2l_mask, tf.float32) * tf.cast(in_range, tf.float32)

  def full_mask(name, rows, cols):
    value = get(name)
    if value is None:
      return tf.ones([batch_size, rows, cols], tf.float32)
    return tf.cast(value, tf.float32)

  l2g_mask = full_mask("l2g_att_mask", long_len, global_len)
  g2g_mask = full_mask("g2g_att_mask", global_len, global_len)
  g2l_mask = full_mask("g2l_att_mask", global_len, long_len)

  long_valid = tf.cast(
      tf.logical_or(tf.reduce_any(l2l_mask > 0, -1),
                    tf.reduce_any(l2g_mask > 0, -1)), tf.float32)  # [B, L]
  global_valid = tf.cast(
      tf.logical_or(tf.reduce_any(g2g_mask > 0, -1),
                    tf.reduce_any(g2l_mask > 0, -1)), tf.float32)  # [B, G]

  l2l_ids = get("l2l_relative_att_ids")
  l2g_ids = get("l2g_relative_att_ids")
  if sparse:
    block_len = r + 1
    l2l_adder = _adder(blocking.window_to_blocked(l2l_mask, r))
    l2g_adder = _adder(blocking.split_into_blocks(l2g_mask, block_len, 1))
    long_valid = blocking.split_into_blocks(long_valid, block_len, 1)
    long_valid = long_valid[:, tf.newaxis, :, :, tf.newaxis]
    if l2l_ids is not None:
      l2l_ids = blocking.split_into_blocks(l2l_ids, block_len, 1)
    if l2g_ids is not None:
      l2g_ids = blocking.split_into_blocks(l2g_ids, block_len, 1)
  else:
    l2l_adder = _adder(blocking.window_to_full(l2l_mask, r))
    l2g_adder = _adder(l2g_mask)
    long_valid = long_valid[:, tf.newaxis, :, tf.newaxis]
    if l2l_ids is not None:
      l2l_ids = blocking.window_to_full(l2l_ids, r)

  return PreparedSideInputs(
      sparse=sparse,
      long_len=long_len,
      l2l_adder=l2l_adder[:, tf.newaxis],
      l2g_adder=l2g_adder[:, tf.newaxis],
      g2g_adder=_adder(g2g_mask)[:, tf.newaxis],
      g2l_adder=_adder(g2l_mask)[:, tf.newaxis],
      long_valid=long_valid,
      global_valid=global_valid[:, tf.newaxis, :, tf.newaxis],
      l2l_ids=l2l_ids,
      l2g_ids=l2g_ids,
      g2g_ids=get("g2g_relative_att_ids"),
      g2l_ids=get("g2l_relative_att_ids"))
