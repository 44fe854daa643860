"""Tests for demos/wikihop/synthetic.py: format, determinism, the reasoning
chain, and that shortcut baselines stay near chance."""

import collections
import json
import random
import re

import numpy as np
import pytest

import cli_testing
from demos.wikihop import demo
from demos.wikihop import synthetic
from tasks.common.featurization import tokenization
from tasks.wikihop import data
from tasks.wikihop import features as F


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
  out = tmp_path_factory.mktemp("syn")
  paths = synthetic.write_dataset(str(out), num_train=400, num_dev=300,
                                  seed=7)
  splits = {}
  for split in ("train", "dev"):
    with open(paths[split]) as f:
      splits[split] = json.load(f)
  return paths, splits


def test_qangaroo_format_and_validity(dataset):
  paths, splits = dataset
  for split, recs in splits.items():
    assert isinstance(recs, list) and len(recs) == (400 if split == "train"
                                                   else 300)
    for i, r in enumerate(recs):
      assert set(r) == {"id", "query", "candidates", "answer", "supports"}
      assert all(isinstance(c, str) for c in r["candidates"])
      assert all(isinstance(s, str) for s in r["supports"])
      record = data.validate_record(r, paths[split], i)
      assert len(record.candidates) >= 4
      assert len(set(record.candidates)) == len(record.candidates)
  ids = [r["id"] for r in splits["train"] + splits["dev"]]
  assert len(set(ids)) == len(ids)


def test_deterministic_given_seed(tmp_path):
  a = synthetic.write_dataset(str(tmp_path / "a"), 30, 20, seed=3)
  b = synthetic.write_dataset(str(tmp_path / "b"), 30, 20, seed=3)
  c = synthetic.write_dataset(str(tmp_path / "c"), 30, 20, seed=4)
  d = synthetic.write_dataset(str(tmp_path / "d"), 50, 20, seed=3)
  def read(path):
    with open(path, "rb") as f:
      return f.read()

  for key in ("train", "dev", "vocab"):
    assert read(a[key]) == read(b[key])
  assert read(a["train"]) != read(c["train"])
  # Dev does not depend on the number of training examples.
  assert read(a["dev"]) == read(d["dev"])
  assert read(a["vocab"]) == read(c["vocab"])


def _facts(record):
  """head -> tail for every fact sentence in the supports."""
  facts = {}
  heads = "|".join(re.escape(t.split("{head}")[1].split("{tail}")[0])
                   for ts in synthetic.TEMPLATES.values() for t in ts)
  for doc in record["supports"]:
    for m in re.finditer(rf"(\w+)(?:{heads})(\w+)\.", doc):
      assert m.group(1).lower() not in facts
      facts[m.group(1).lower()] = m.group(2).lower()
  return facts


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_answer_is_reached_only_by_following_the_chain(hops):
  recs = synthetic.make_split(100, seed=1, split="dev", hops=hops)
  for r in recs:
    facts = _facts(r)
    entity = r["query"].split()[1]
    path = [entity]
    while entity in facts:
      entity = facts[entity]
      path.append(entity)
    assert len(path) == hops + 1 and entity == r["answer"]
    # The chain crosses `hops` different documents.
    docs = {i for i, d in enumerate(r["supports"]) for a, b in
            zip(path, path[1:]) if a in d.lower() and b in d.lower()}
    assert len(docs) == hops
    # Every candidate ends a chain of the same length (no dead ends).
    tails = collections.Counter(facts.values())
    assert all(tails[c] == 1 for c in r["candidates"])


def _mentions(record, candidate):
  return sum(len(re.findall(rf"\b{candidate}\b", s.lower()))
             for s in record["supports"])


def test_shortcut_baselines_stay_near_chance(dataset):
  _, splits = dataset
  dev, train = splits["dev"], splits["train"]
  chance = np.mean([1 / len(r["candidates"]) for r in dev])
  assert chance <= 0.25

  def accuracy(pick):
    return np.mean([pick(r) == r["answer"] for r in dev])

  most_mentioned = accuracy(lambda r: max(
      r["candidates"], key=lambda c: _mentions(r, c)))
  first_candidate = accuracy(lambda r: r["candidates"][0])
  last_candidate = accuracy(lambda r: r["candidates"][-1])
  first_doc = accuracy(lambda r: next(
      (c for c in r["candidates"] if c in r["supports"][0].lower()),
      r["candidates"][0]))
  # Memorize query village -> answer on train (the query alone).
  memory = {r["query"]: r["answer"] for r in train}
  by_query = accuracy(lambda r: memory.get(r["query"], r["candidates"][0]))
  # The doc holding the query village: its last word is a city, not a
  # candidate; the candidate in the doc right after it (position).
  def next_doc(r):
    village = r["query"].split()[1]
    i = next(i for i, d in enumerate(r["supports"]) if village in d.lower())
    d = r["supports"][(i + 1) % len(r["supports"])].lower()
    return next((c for c in r["candidates"] if c in d), r["candidates"][0])
  # Each candidate is mentioned exactly once: counting cannot help.
  assert all(_mentions(r, c) == 1 for r in dev for c in r["candidates"])
  for name, acc in [("most_mentioned", most_mentioned),
                    ("first_candidate", first_candidate),
                    ("last_candidate", last_candidate),
                    ("first_doc", first_doc), ("by_query", by_query),
                    ("next_doc", accuracy(next_doc))]:
    # 300 examples: chance ~0.22 with std ~0.024.
    assert acc < chance + 0.09, (name, acc, chance)


def test_vocab_covers_text_and_features_fit_the_demo_model(dataset):
  paths, splits = dataset
  tokens = tokenization.read_vocab(paths["vocab"])
  assert tokens[:5] == ["[PAD]", "[unused0]", "[unused1]", "[unused2]",
                        "[unused3]"]
  assert {"[UNK]", "[CLS]", "[SEP]", "[MASK]"} <= set(tokens)
  assert len(tokens) < 1000
  featurizer = F.WikiHopFeaturizer(paths["vocab"],
                                   long_seq_len=demo.LONG_SEQ_LEN,
                                   global_seq_len=demo.GLOBAL_SEQ_LEN)
  unk = tokens.index("[UNK]")
  # The longest examples have 5 candidates (and fillers): all of them fit.
  longest = sorted(splits["dev"], key=lambda r: -len(json.dumps(r)))[:20]
  for r in splits["dev"][:20] + longest:
    record = data.validate_record(r, "dev.json", 0)
    f, stats = featurizer.featurize_record(record)
    assert not any(stats.values()), stats  # no truncation, no overflow
    assert unk not in f["token_ids"]
    assert f["label"] == record.answer_index
    # Each candidate's single doc mention is linked to it.
    linked = f["l2g_linked_ids"][f["segment_ids"] == 1]
    for c in range(len(record.candidates)):
      assert np.sum(linked == c) >= 1


def test_query_chain_reads_the_chain_back_to_the_answer():
  rng = random.Random(3)
  for hops in (1, 2, 3):
    for i in range(5):
      record = synthetic.make_example(rng, f"c{i}", hops=hops)
      chain = synthetic.query_chain(record)
      assert len(chain) == hops + 1
      assert chain[0] == record["query"].split()[-1]
      assert chain[-1] == record["answer"]


def test_binary_writes_the_dataset_and_needs_an_output_dir(tmp_path):
  out = cli_testing.output_here("demos.wikihop.synthetic",
                                [f"--output_dir={tmp_path}", "--num_train=3",
                                 "--num_dev=2", "--hops=1"])
  assert json.loads(out) == {
      "train": str(tmp_path / "train.json"),
      "dev": str(tmp_path / "dev.json"),
      "vocab": str(tmp_path / "vocab.txt")}
  with open(tmp_path / "dev.json") as f:
    assert len(json.load(f)) == 2
  cli_testing.user_error_line("demos.wikihop.synthetic", ["--num_train=3"],
                              "--output_dir is required")
