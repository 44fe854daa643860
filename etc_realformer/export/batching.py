"""Checks and padding of the batched raw-input signatures (`serve_raw_batch`).

TF Serving's request batching concatenates every input of a signature along
dimension 0, so a signature it can batch takes every input as [B, ...] with
one B. A record's variable-length parts (candidates, sentences, tokens) come
as rows padded to the batch's longest, with a per-record count; what lies
past a count is ignored, whatever its value (TF Serving's
`pad_variable_length_inputs` pads a request's tensors to the batch's with
each tensor's first value). A count past its padded tensor would be cut
silently (slicing clamps), so the signatures check their inputs first: the
checks below fail the request with an `InvalidArgumentError` whose message
names the signature and the input.
"""

from typing import List, Mapping, Optional, Sequence

import tensorflow as tf

Checks = List[Optional[tf.Operation]]


def same_batch(signature: str, inputs: Mapping[str, tf.Tensor]) -> Checks:
  """Every input's dimension 0 equals the first one's (B)."""
  names = list(inputs)
  first = names[0]
  size = tf.shape(inputs[first])[0]
  return [tf.debugging.assert_equal(
      tf.shape(inputs[name])[0], size,
      message=f"{signature}: `{name}` must have one row per record, as "
              f"`{first}` (dimension 0 is the batch)")
          for name in names[1:]]


def counts_fit(signature: str, count_name: str, counts: tf.Tensor,
               padded: Mapping[str, tf.Tensor], summed: bool = False
               ) -> Checks:
  """0 <= counts[b] <= the padded length (dimension 1) of each `padded`.

  Args:
    signature: the signature's name, for the messages.
    count_name: the input `counts` comes from.
    counts: <int32>[B].
    padded: name -> [B, N, ...] tensors whose rows `counts` cut.
    summed: `counts` is the sum of a record's `count_name` (e.g. its
      supports' sentence counts), for the messages.
  """
  what = f"`{count_name}`"
  if summed:
    what = f"the sum of {what} over a record"
  checks = [tf.debugging.assert_non_negative(
      counts, message=f"{signature}: {what} must be >= 0")]
  for name, x in padded.items():
    checks.append(tf.debugging.assert_less_equal(
        counts, tf.shape(x, out_type=counts.dtype)[1],
        message=f"{signature}: {what} exceeds the padded length "
                f"(dimension 1) of `{name}`"))
  return checks


def counted(values: tf.Tensor, counts: tf.Tensor) -> tf.Tensor:
  """[B, N] values with what lies past counts[b] (padding, of any value)
  zeroed."""
  kept = tf.sequence_mask(counts, tf.shape(values)[1])
  return tf.where(kept, values, tf.zeros_like(values))


def non_negative(signature: str, name: str, values: tf.Tensor) -> Checks:
  return [tf.debugging.assert_non_negative(
      values, message=f"{signature}: `{name}` must be >= 0")]


def valid_utf8(signature: str, name: str, texts: tf.Tensor,
               where: Sequence = ()) -> Checks:
  """Every string of `texts` is valid UTF-8 (a tokenizer would otherwise
  drop or replace the bad bytes and answer for another text).

  A valid string is its own UTF-8 -> UTF-8 transcoding; an invalid byte
  sequence comes back replaced.

  Args:
    signature: the signature's name, for the message.
    name: the input `texts` comes from.
    texts: <string>[...].
    where: leading `data` of the failure (e.g. ["record", b]).
  """
  flat = tf.reshape(texts, [-1])
  bad = tf.not_equal(tf.strings.unicode_transcode(
      flat, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD),
                     flat)
  first_bad = tf.reduce_min(tf.concat(
      [tf.cast(tf.where(bad)[:, 0], tf.int32), [-1]], 0)[:1])
  return [tf.debugging.Assert(
      tf.logical_not(tf.reduce_any(bad)),
      [f"{signature}: `{name}` is not valid UTF-8", *where,
       "string", first_bad])]


def pad_rows(x: tf.Tensor, length: tf.Tensor, value) -> tf.Tensor:
  """[B, N] -> [B, length]: cut, or padded with `value`."""
  x = x[:, :length]
  return tf.pad(x, [[0, 0], [0, length - tf.shape(x)[1]]],
                constant_values=value)


def pad_vector(x: tf.Tensor, length: tf.Tensor, value) -> tf.Tensor:
  """[n] -> [length], n <= length: padded with `value`."""
  return tf.pad(x, [[0, length - tf.shape(x)[0]]], constant_values=value)


def row_specs(specs: Mapping[str, tf.TensorSpec],
              names: Optional[Sequence[str]] = None
              ) -> Mapping[str, tf.TensorSpec]:
  """Batched specs [B, ...] -> one row's specs [...] (`tf.map_fn`'s
  `fn_output_signature` of a per-record function)."""
  names = list(specs) if names is None else names
  return {k: tf.TensorSpec(specs[k].shape[1:], specs[k].dtype)
          for k in names}
