"""Tests for demos/hotpotqa/synthetic.py: released format, determinism,
solvability, chance."""

import collections
import json
import re

from demos.hotpotqa import synthetic
from tasks.hotpotqa import data
from tasks.hotpotqa import evaluate


def test_format_determinism_and_vocabulary(tmp_path):
  paths = synthetic.write_dataset(str(tmp_path), num_train=30, num_dev=10,
                                  seed=7)
  with open(paths["dev"]) as f:
    dev = json.load(f)
  assert dev == synthetic.make_split(10, 7, "dev")
  assert synthetic.make_split(10, 8, "dev") != dev
  # A different train size leaves dev alone.
  other = synthetic.write_dataset(str(tmp_path / "o"), num_train=5,
                                  num_dev=10, seed=7)
  with open(other["dev"]) as f:
    assert json.load(f) == dev
  with open(paths["vocab"]) as f:
    lines = f.read().split("\n")
  vocab = set(lines)
  with open(paths["train"]) as f:
    train = json.load(f)
  for raw in train + dev:
    record = data.validate_record(raw, "synthetic", 0, require_labels=True)
    assert set(raw) == {"_id", "question", "answer", "type", "level",
                        "supporting_facts", "context"}
    text = " ".join([record.question] + list(record.titles) +
                    [s for p in record.sentences for s in p])
    for word in re.findall(r"\w+|[^\w\s]", text.lower()):
      assert word in vocab, word
  assert lines.index("[CLS]") == 101 and lines.index("[unused0]") == 1


def test_facts_support_the_answer_and_labels_are_balanced():
  records = synthetic.make_split(300, 0, "train")
  kinds = collections.Counter()
  for raw in records:
    context = dict((t, s) for t, s in raw["context"])
    facts = [context[t][i] for t, i in raw["supporting_facts"]]
    if raw["answer"] in ("yes", "no"):
      kinds[raw["answer"]] += 1
      assert raw["type"] == "comparison"
    else:
      kinds["span"] += 1
      assert raw["answer"] in facts[0] and " born in " in facts[0]
    for title, _ in raw["supporting_facts"]:
      assert title in raw["question"]
  assert all(80 <= n <= 120 for n in kinds.values()), kinds  # ~1/3 each


def test_chance_level_is_low_and_gold_is_perfect():
  gold = synthetic.make_split(300, 0, "dev")
  chance = synthetic.chance_joint_f1(gold)
  assert 0.1 < chance < 0.3, chance
  perfect = {"answer": {r["_id"]: r["answer"] for r in gold},
             "sp": {r["_id"]: r["supporting_facts"] for r in gold}}
  assert evaluate.evaluate(perfect, gold)["joint_f1"] == 1.0
