"""Tests for tasks.common.featurization.featurizing: fit, last_of_run,
special ids, and every task featurizer's entry points."""

import dataclasses
import importlib
import inspect
from typing import ClassVar

import numpy as np
import pytest
import tensorflow as tf

from etc_realformer.errors import UserInputError
from tasks.common.featurization import featurizing
from tasks.common.featurization import tokenization
from tokenization_testing import train_sentencepiece
from tokenization_testing import write_test_vocab


def test_fit_crops_or_pads_the_first_axis_to_a_static_length():
  np.testing.assert_array_equal(
      featurizing.fit(tf.constant([1, 2, 3]), 5, -1), [1, 2, 3, -1, -1])
  np.testing.assert_array_equal(
      featurizing.fit(tf.constant([1, 2, 3]), 2, -1), [1, 2])
  two_d = featurizing.fit(tf.ones([1, 3]), 2, 0.5)
  np.testing.assert_array_equal(two_d, [[1, 1, 1], [0.5, 0.5, 0.5]])

  @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
  def traced(values):
    out = featurizing.fit(values, 4, 0)
    assert out.shape.as_list() == [4]  # static, for the TFRecord spec
    return out

  np.testing.assert_array_equal(traced(tf.constant([7])), [7, 0, 0, 0])


def test_last_of_run_marks_each_runs_end():
  got = featurizing.last_of_run(tf.constant([0, 0, 1, 1, 1, 5, 0]))
  np.testing.assert_array_equal(got, [0, 1, 0, 0, 1, 1, 1])
  assert featurizing.last_of_run(tf.constant([], tf.int32)).shape == [0]


@dataclasses.dataclass(frozen=True)
class _Ids(featurizing.SpecialTokenIds):
  cls: int
  sentence: int
  WORDPIECE: ClassVar = dict(cls="[CLS]", sentence=1)
  SENTENCEPIECE: ClassVar = dict(cls=40, sentence="<unused_0>")


def test_special_ids_fixed_or_looked_up_by_vocabulary_kind(tmp_path):
  vocab = write_test_vocab(tmp_path / "vocab.txt", ["a"])
  wordpiece = tokenization.make_tokenizer(vocab_path=vocab)
  assert _Ids.for_tokenizer(wordpiece) == _Ids(cls=12, sentence=1)
  assert _Ids.names() == ("cls", "sentence")
  assert featurizing.special_ids(wordpiece, {"x": "[SEP]", "y": 7}, {}) == {
      "x": 13, "y": 7}
  with pytest.raises(UserInputError,
                     match=r"vocab.txt: no entry .*x='\[nope\]'"):
    featurizing.special_ids(wordpiece, {"x": "[nope]"}, {})


def test_special_ids_of_a_sentencepiece_vocabulary(tmp_path):
  model = train_sentencepiece(tmp_path / "sp.model",
                              ["a small text about cities."] * 50,
                              vocab_size=30)
  sentencepiece = tokenization.make_tokenizer(spm_model_path=model)
  # A tiny model has no <unused_0>: the lookup names it and the model file.
  with pytest.raises(UserInputError, match=r"sp.model: .*'<unused_0>'"):
    _Ids.for_tokenizer(sentencepiece)
  assert featurizing.special_ids(sentencepiece, {}, {"cls": 40}) == {
      "cls": 40}


def test_ids_from_a_flag():
  assert _Ids.from_flag(None, "ids") is None
  assert _Ids.from_flag([], "ids") is None
  assert _Ids.from_flag(["7", "8"], "ids") == _Ids(cls=7, sentence=8)
  with pytest.raises(UserInputError, match="--ids needs 2 ids: cls,sentence"):
    _Ids.from_flag(["7"], "ids")
  with pytest.raises(UserInputError, match="--ids: cls,sentence must be int"):
    _Ids.from_flag(["7", "x"], "ids")


def test_featurizer_base_checks_lengths_before_the_vocabulary(tmp_path):
  with pytest.raises(UserInputError, match="at least 2, got long 1"):
    featurizing.Featurizer("f", vocab_path=str(tmp_path / "missing.txt"),
                           long_seq_len=1, global_seq_len=4, min_seq_len=2)
  vocab = write_test_vocab(tmp_path / "vocab.txt", ["a"])
  featurizer = featurizing.Featurizer("f", vocab, long_seq_len=8,
                                      global_seq_len=4)
  assert (featurizer.long_seq_len, featurizer.global_seq_len) == (8, 4)
  assert featurizer.tokenizer.kind == tokenization.WORDPIECE


@pytest.mark.parametrize("module, name", [
    ("tasks.wikihop.features", "WikiHopFeaturizer"),
    ("tasks.hotpotqa.features", "HotpotFeaturizer"),
    ("tasks.nq.features", "NqFeaturizer"),
    ("tasks.openkp.features", "OpenKPFeaturizer")])
def test_every_task_featurizer_has_the_protocols_entry_points(module, name):
  cls = getattr(importlib.import_module(module), name)
  assert issubclass(cls, featurizing.Featurizer)
  for entry in featurizing.ENTRY_POINTS:
    assert callable(getattr(cls, entry, None)) or isinstance(
        getattr(cls, entry, None), property), (name, entry)
  # No other public featurize* form (WikiHop's batch is its serving batch).
  others = {n for n in dir(cls) if n.startswith("featurize")} - set(
      featurizing.ENTRY_POINTS) - {"featurize_batch"}
  assert not others, (name, others)
  params = lambda fn: list(inspect.signature(fn).parameters)
  assert params(cls.featurize_record)[:2] == ["self", "record"]
  assert params(cls.feature_spec) == ["self"]
