"""Tiny OpenKP files in the released format, for the OpenKP tests.

Each document has 3-5 VDOM elements; the first is a bold heading (larger
font) whose words are the gold keyphrase, so the phrase is learnable from the
text and from the visual features alike.
"""

import json
import os
import random
from typing import Any, Dict, List, Optional, Sequence

from tests.test_common_tokenization import write_test_vocab

FILLER = [f"w{i}" for i in range(40)]
TOPICS = [f"kp{i}" for i in range(24)]
# Non-ASCII words: the uncased WordPiece vocabulary holds them accent-free.
NON_ASCII = ["Café", "Zürich", "naïve"]
VOCAB_WORDS = FILLER + TOPICS + ["cafe", "zurich", "naive", "the", "a"]


def vdom_features(x=10.0, y=20.0, width=300.0, height=40.0, block=1.0,
                  inline=0.0, heading=0.0, leaf=1.0, font=16.0, bold=0.0,
                  parent: Optional[Sequence[float]] = None) -> List[float]:
  """The 20 VDOM numbers: element (x, width, y, height, is_block, is_inline,
  is_heading, is_leaf, font_size, is_bold), then the parent's."""
  own = [x, width, y, height, block, inline, heading, leaf, font, bold]
  return own + list(parent if parent is not None else
                    [0.0, 1200.0, 0.0, 3000.0, 1.0, 0.0, 0.0, 0.0, 16.0, 0.0])


def make_record(url: str, elements: Sequence[Sequence[str]],
                keyphrases: Optional[Sequence[Sequence[str]]],
                features: Optional[Sequence[Sequence[float]]] = None
                ) -> Dict[str, Any]:
  """A released-format record from per-element word lists."""
  words, vdom = [], []
  for i, element_words in enumerate(elements):
    start = len(words)
    words.extend(element_words)
    vdom.append({"Id": 7, "text": " ".join(element_words),
                 "feature": list(features[i]) if features else
                 vdom_features(y=20.0 + 50 * i),
                 "start_idx": start, "end_idx": len(words)})
  record = {"url": url, "text": " ".join(words), "VDOM": json.dumps(vdom)}
  if keyphrases is not None:
    record["KeyPhrases"] = [list(kp) for kp in keyphrases]
  return record


def synthetic_record(rng: random.Random, url: str, labeled: bool = True,
                     non_ascii: bool = False) -> Dict[str, Any]:
  """A document whose keyphrase is its bold heading (1 or 2 topic words)."""
  topic = rng.sample(TOPICS, rng.choice([1, 2]))
  elements = [topic]
  features = [vdom_features(y=10.0, height=60.0, heading=1.0, font=32.0,
                            bold=1.0)]
  for i in range(rng.randint(2, 4)):
    body = [rng.choice(FILLER) for _ in range(rng.randint(3, 8))]
    if non_ascii and i == 0:
      body[1:1] = NON_ASCII
    if rng.random() < 0.5:  # The phrase also occurs later, in the body.
      body[2:2] = topic
    elements.append(body)
    features.append(vdom_features(y=100.0 + 80 * i, font=14.0))
  return make_record(url, elements, [topic] if labeled else None, features)


def write_jsonl(path: str, recs: Sequence[Any]) -> str:
  with open(path, "w", encoding="utf-8") as f:
    for r in recs:
      f.write((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False))
              + "\n")
  return path


def write_openkp_dir(out_dir: str, num_train: int = 48, num_dev: int = 8,
                     num_eval: int = 4, seed: int = 0) -> Dict[str, str]:
  """OpenKPTrain/Dev/EvalPublic.jsonl and a vocab.txt in `out_dir`."""
  rng = random.Random(seed)
  os.makedirs(out_dir, exist_ok=True)
  paths = {"vocab": write_test_vocab(os.path.join(out_dir, "vocab.txt"),
                                     VOCAB_WORDS)}
  for split, n, labeled in (("Train", num_train, True), ("Dev", num_dev, True),
                            ("EvalPublic", num_eval, False)):
    recs = [synthetic_record(rng, f"http://{split.lower()}.example/{i}",
                             labeled, non_ascii=i % 3 == 0) for i in range(n)]
    paths[split] = write_jsonl(os.path.join(out_dir, f"OpenKP{split}.jsonl"),
                               recs)
  return paths


# ----------------------------------------------------------------- tests
# pylint: disable=g-import-not-at-top,wrong-import-position
import pytest

from tasks.common import records
from tasks.common import tfrecords
from tasks.openkp import data
from tasks.openkp import features as F
from tasks.openkp import preprocess

GOOD = make_record("http://good", [["Machine", "Learning"], ["is", "fun"]],
                   [["machine", "learning"]])


def _with_vdom(record, mutate):
  vdom = json.loads(record["VDOM"])
  mutate(vdom)
  return dict(record, VDOM=json.dumps(vdom))


def _bad_records():
  """(json line or record, reason, field) for each kind of bad record."""
  no_kp = dict(GOOD, url="u-no-kp")
  del no_kp["KeyPhrases"]

  def set_(i, key, value):
    def mutate(vdom):
      vdom[i][key] = value
    return mutate

  return [
      ("{not json", data.NOT_JSON, "<record>"),
      (no_kp, data.MISSING_FIELD, "KeyPhrases"),
      (dict(GOOD, url="u-vdom-str", VDOM="[{oops"), data.INVALID_VDOM,
       "VDOM"),
      (dict(GOOD, url="u-vdom-empty", VDOM="[]"), data.INVALID_VDOM, "VDOM"),
      (_with_vdom(dict(GOOD, url="u-gap"), set_(1, "start_idx", 3)),
       data.VDOM_NOT_CONTIGUOUS, "VDOM[1].start_idx"),
      (_with_vdom(dict(GOOD, url="u-short"), set_(1, "end_idx", 3)),
       data.VDOM_NOT_CONTIGUOUS, "VDOM[1].start_idx"),
      (_with_vdom(dict(GOOD, url="u-text"), set_(0, "text", "Machine")),
       data.VDOM_TEXT_MISMATCH, "VDOM[0].text"),
      (_with_vdom(dict(GOOD, url="u-feat"), set_(0, "feature", [1.0] * 19)),
       data.INVALID_VDOM_FEATURE, "VDOM[0].feature"),
      (_with_vdom(dict(GOOD, url="u-ind"),
                  set_(1, "feature", vdom_features(bold=0.5))),
       data.INVALID_VDOM_FEATURE, "VDOM[1].feature"),
      (dict(GOOD, url="u-nokp", KeyPhrases=[["machine", "learn"], ["xyz"]]),
       data.NO_VALID_KEYPHRASE, "KeyPhrases"),
      (dict(GOOD, url="u-kptype", KeyPhrases=[["ok", 3]]), data.WRONG_TYPE,
       "KeyPhrases[0]"),
      (dict(GOOD, url="u-empty", text=" "), data.EMPTY_TEXT, "text"),
  ]


def test_whole_word_matching_is_case_insensitive_and_bounded():
  text = "deep machine learning, for machine-learning people".lower()
  assert data.occurs_as_whole_words(text, "Machine Learning,")
  assert data.occurs_as_whole_words(text, "deep")
  assert data.occurs_as_whole_words(text, "people")
  assert not data.occurs_as_whole_words(text, "machine learning")  # comma
  assert not data.occurs_as_whole_words(text, "learn")
  assert data.occurs_as_whole_words(text, "for machine-learning")
  assert not data.occurs_as_whole_words(text, "")
  assert data.join_keyphrase([" Machine ", "", "learning"]) == (
      "Machine learning")


def test_valid_record_keeps_at_most_three_keyphrases():
  rec = make_record("u", [["a", "b", "c", "d"]],
                    [["A"], ["b"], ["zz"], ["c"], ["d"]])
  record, num_valid = data.validate_record(rec, "f", 0, labeled=True)
  assert num_valid == 4
  assert record.keyphrases == ("A", "b", "c")
  assert record.num_keyphrases_dropped == 2  # "zz" invalid, "d" over 3
  assert record.words == ["a", "b", "c", "d"]
  assert record.element_starts == [0]
  assert json.loads(json.dumps(record.to_json()))["KeyPhrases"] == [
      ["A"], ["b"], ["c"]]


def test_keyphrase_positions_first_occurrence_inside_one_element():
  rec = make_record("u", [["x", "Deep"], ["learning", "y"],
                          ["deep", "learning", "deep"]],
                    [["deep", "learning"], ["Deep"], ["y"]])
  record, _ = data.validate_record(rec, "f", 0, labeled=True)
  # "deep learning" straddles elements 0/1 first; its first occurrence
  # inside one element is at word 4. Sorted lower-cased order.
  assert data.keyphrase_positions(record) == [(1, 1), (4, 2), (3, 1)]


def test_bad_records_are_skipped_counted_and_named(tmp_path):
  bad = _bad_records()
  lines = [GOOD] + [r for r, _, _ in bad]
  # A line with bytes that are not UTF-8 (a record of its own).
  raw = "\n".join(l if isinstance(l, str) else json.dumps(l) for l in lines)
  bytes_line = json.dumps(dict(GOOD, url="u-bytes")).replace(
      '"text": "Machine', '"text": "Mach\\u00ffine').encode("utf-8")
  bytes_line = bytes_line.replace(b"\\u00ff", b"\xff")
  raw = raw.encode("utf-8") + b"\n" + bytes_line + b"\n"
  path = tmp_path / "OpenKPDev.jsonl"
  path.write_bytes(raw)
  stats = records.RecordStats(input_file=str(path))
  kept = data.read_records(str(path), stats=stats)
  assert [r.url for r in kept] == ["http://good"]
  assert stats.examples_read == len(lines) + 1
  named = {(s["reason"], s["field"]) for s in stats.skipped_records}
  for _, reason, field in bad:
    assert (reason, field) in named, (reason, field)
  assert (data.UNDECODABLE_TEXT, "text") in named
  assert stats.num_skipped == len(bad) + 1
  by_id = {s["id"]: s for s in stats.skipped_records}
  assert by_id["line 2"]["reason"] == data.NOT_JSON  # named by line
  assert by_id["u-gap"]["file"] == str(path)


def test_strict_fails_on_first_bad_record(tmp_path):
  path = write_jsonl(str(tmp_path / "OpenKPTrain.jsonl"),
                     [GOOD, _bad_records()[4][0]])
  with pytest.raises(records.BadRecordError, match="u-gap.*VDOM\\[1\\]"):
    data.read_records(path, strict=True)


def test_preprocess_strict_fails_before_writing(tmp_path):
  vocab = write_test_vocab(tmp_path / "vocab.txt", VOCAB_WORDS)
  path = write_jsonl(str(tmp_path / "OpenKPDev.jsonl"),
                     [GOOD, _bad_records()[3][0]])
  featurizer = preprocess.make_featurizer(vocab, None, 16, 4)
  with pytest.raises(records.BadRecordError, match="u-vdom-empty"):
    preprocess.preprocess_file(path, str(tmp_path / "out"), featurizer,
                               strict=True)
  assert not (tmp_path / "out" / "OpenKPDev.tfrecord").exists()


def test_unusable_files(tmp_path):
  with pytest.raises(records.InputFileError, match="cannot read"):
    data.read_records(str(tmp_path / "missing.jsonl"))
  (tmp_path / "empty.jsonl").write_text("\n \n")
  with pytest.raises(records.InputFileError, match="empty"):
    data.read_records(str(tmp_path / "empty.jsonl"))


def test_duplicate_urls_keep_most_valid_keyphrases_or_first(tmp_path):
  one = make_record("http://dup", [["a", "b"]], [["a"], ["zz"]])
  two = make_record("http://dup", [["a", "b"]], [["a"], ["b"]])
  three = make_record("http://dup", [["a", "b"]], [["b"], ["a"]])
  stats = records.RecordStats()
  kept = data.read_records(write_jsonl(str(tmp_path / "OpenKPDev.jsonl"),
                                       [one, two, three, GOOD]), stats=stats)
  assert [(r.url, r.line) for r in kept] == [("http://dup", 1),
                                            ("http://good", 3)]
  assert stats.skipped == {data.DUPLICATE_URL: 2}
  # Unlabelled (EvalPublic) files: the first one wins, no KeyPhrases needed.
  unlabeled = [dict(r) for r in (one, two)]
  for r in unlabeled:
    del r["KeyPhrases"]
  kept = data.read_records(write_jsonl(
      str(tmp_path / "OpenKPEvalPublic.jsonl"), unlabeled))
  assert [(r.line, r.keyphrases) for r in kept] == [(0, None)]


def test_preprocess_writes_records_stats_and_dedup_jsonl(tmp_path):
  vocab = write_test_vocab(tmp_path / "vocab.txt", VOCAB_WORDS)
  long_rec = make_record("http://long", [["kp1"] + FILLER[:30]], [["kp1"]])
  late_rec = make_record("http://late", [FILLER[:30] + ["kp2"]], [["kp2"]])
  path = write_jsonl(str(tmp_path / "OpenKPTrain.jsonl"),
                     [GOOD, long_rec, late_rec, _bad_records()[2][0]])
  featurizer = preprocess.make_featurizer(vocab, None, 16, 4)
  out = tmp_path / "out"
  stats = preprocess.preprocess_file(path, str(out), featurizer)
  assert stats.examples_written == 2  # late_rec: gold cut by truncation
  assert stats.skipped == {data.INVALID_VDOM: 1,
                           data.KEYPHRASES_TRUNCATED: 1}
  saved = records.read_stats_json(str(out / "OpenKPTrain.stats.json"))
  assert saved["examples_truncated"] == 1
  assert saved["truncation"]["words_dropped"] == 31 - 16
  dedup = [json.loads(l) for l in open(out / "OpenKPTrain.dedup.jsonl")]
  assert [d["url"] for d in dedup] == ["http://good", "http://long",
                                       "http://late"]
  parsed = list(tfrecords.make_dataset(str(out / "OpenKPTrain.tfrecord"),
                                       F.feature_spec(16, 4)))
  assert [p["url"].numpy() for p in parsed] == [b"http://good",
                                                b"http://long"]
  assert parsed[0]["keyphrases"].numpy().tolist() == [b"machine learning"]
  assert parsed[0]["label_start"].numpy().tolist() == [0, -1, -1]
  assert parsed[0]["label_length"].numpy().tolist() == [2, -1, -1]
  # Dev files keep documents whose gold was cut (they count in the metric).
  dev = write_jsonl(str(tmp_path / "OpenKPDev.jsonl"), [late_rec])
  stats = preprocess.preprocess_file(dev, str(out), featurizer)
  assert stats.examples_written == 1 and not stats.skipped
  assert stats.truncation["keyphrases_truncated"] == 1
