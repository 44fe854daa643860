"""Argument checks and conversions shared by the side-input builders.

Every builder accepts NumPy arrays or tensors of any integer (or bool) dtype,
batched or unbatched; these helpers convert them to int32, add a batch axis
when needed, check ranks, lengths and (when known at trace time) values, and
raise `ValueError` naming the argument.
"""

from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf

SideInputs = Dict[str, Optional[tf.Tensor]]


def check_int(name: str, value: Any, minimum: int) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"{name} must be a Python int, got {value!r}")
  if value < minimum:
    raise ValueError(f"{name} must be >= {minimum}, got {value}")
  return int(value)


def check_radius_and_distance(local_radius: Any,
                              relative_pos_max_distance: Any
                              ) -> Tuple[int, int]:
  """(r >= 1, M >= 0) as Python ints, or a ValueError naming the argument."""
  return (check_int("local_radius", local_radius, 1),
          check_int("relative_pos_max_distance", relative_pos_max_distance,
                    0))


def to_int32(name: str, value: Any) -> tf.Tensor:
  """Converts to an int32 tensor; rejects float and string inputs."""
  try:
    tensor = tf.convert_to_tensor(value)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{name}: cannot convert to a tensor: {e}") from e
  if not (tensor.dtype.is_integer or tensor.dtype == tf.bool):
    raise ValueError(f"{name} must have an integer dtype, got {tensor.dtype}")
  return tf.cast(tensor, tf.int32)


def prepare(long_args: Mapping[str, Any],
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
      tensor = to_int32(name, value)
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


def static_values(tensor: tf.Tensor) -> Optional[np.ndarray]:
  """The tensor's values if known at trace time (eager or constant), else
  None."""
  try:
    return tf.get_static_value(tensor)
  except (TypeError, ValueError, NotImplementedError):
    return None


def check_binary(name: str, tensor: tf.Tensor) -> None:
  values = static_values(tensor)
  if values is not None and not np.isin(values, (0, 1)).all():
    raise ValueError(f"{name} must hold only 0 and 1, got values "
                     f"{sorted(set(np.unique(values).tolist()))[:8]}")


def check_ids_in_range(name: str, ids: tf.Tensor, real: tf.Tensor,
                        low: int, global_len: Optional[int],
                        real_from_breakpoints: bool = False) -> None:
  """Checks `low <= ids < G` at real (non-padding) tokens when all is static.

  `real` is nonzero at real tokens, or, with `real_from_breakpoints`, holds
  end-of-example breakpoints (real = before or at the last 1).
  """
  if global_len is None:
    return
  values = static_values(ids)
  real_values = static_values(real)
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


def dim(tensor: tf.Tensor, axis: int):
  """Static dimension when known, else the dynamic one."""
  static = tensor.shape[axis]
  return static if static is not None else tf.shape(tensor)[axis]


def finish(side_inputs: SideInputs, unbatched: bool) -> SideInputs:
  if unbatched:
    return {k: (None if v is None else v[0]) for k, v in side_inputs.items()}
  return side_inputs
