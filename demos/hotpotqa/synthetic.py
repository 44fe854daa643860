r"""Synthetic HotpotQA (distractor format): the project's learnable demo data.

  python -m demos.hotpotqa.synthetic --output_dir=DIR \
      [--num_train=2000 --num_dev=300 --seed=0 --num_paragraphs=4]

writes `DIR/hotpot_train_v1.1.json` and `DIR/hotpot_dev_distractor_v1.json`
in the exact released format (one JSON array of {_id, question, answer, type,
level, supporting_facts, context}) and `DIR/vocab.txt`, a BERT-shaped uncased
WordPiece vocabulary ([PAD]=0, [unused0..98]=1..99, [UNK]=100, [CLS]=101,
[SEP]=102, [MASK]=103, punctuation, then every word), so the original
WordPiece global token ids (CLS 101, sentence 1, question 3, paragraph 5)
apply unchanged.

Each example has `num_paragraphs` paragraphs about different people; the
title is the person's name and the sentences (in shuffled order) say where
they were born, what they work as and, sometimes, a neutral filler:

  ["Tamoli", ["Tamoli works as a baker.", "Tamoli was born in Berunda."]]

Three question kinds, equally likely (the HotpotQA types in brackets):
- "Where was Tamoli born?" -> "Berunda" (span, "bridge"); supporting fact:
  Tamoli's birth sentence.
- "Does Tamoli work as a baker?" -> "yes" / "no" (half each, "comparison");
  supporting fact: Tamoli's job sentence.
- "Were Tamoli and Kasovi born in the same city?" -> "yes" / "no" (half
  each, "comparison"); supporting facts: both birth sentences.

Nothing can be answered without reading the question against the context:
names, cities and jobs are re-drawn per example, every person has the same
sentence shapes, and paragraph and sentence order are shuffled. A guess that
ignores the question's names (right relation, random person) gets a joint F1
of about 1 / num_paragraphs on the single-fact kinds and, for the
two-person kind, at most the chance of a 2-of-4 guess; `chance_joint_f1`
measures the best such question-blind rule on a split.
"""

import random
from typing import Any, Dict, List, Sequence

from absl import flags

from demos import common
from etc_realformer import cli
from tasks.hotpotqa import evaluate

TRAIN_FILE = "hotpot_train_v1.1.json"
DEV_FILE = "hotpot_dev_distractor_v1.json"

# Name pools come from syllables with their own fixed seed, so the vocabulary
# is the same for every data seed.
_POOL_SEED = 4321
POOL_SIZES = {"person": 120, "city": 60}
JOBS = ("baker", "farmer", "teacher", "painter", "doctor", "pilot", "singer",
        "writer", "tailor", "sailor", "miner", "judge")
FILLERS = ("{name} likes music.", "{name} has two dogs.",
           "{name} often travels.")
BORN = "{name} was born in {city}."
WORKS = "{name} works as a {job}."
QUESTIONS = {
    "born": "Where was {name} born?",
    "job": "Does {name} work as a {job}?",
    "same_city": "Were {name} and {other} born in the same city?",
}
SPECIAL_TOKENS = (("[PAD]",) + tuple(f"[unused{i}]" for i in range(99)) +
                  ("[UNK]", "[CLS]", "[SEP]", "[MASK]"))
PUNCTUATION = (".", ",", "?", "'", "-")


POOLS = common.name_pools(_POOL_SEED, POOL_SIZES)


def vocabulary() -> List[str]:
  """Every wordpiece the generated text needs, BERT-style ordering."""
  words = set()
  templates = (BORN, WORKS) + FILLERS + tuple(QUESTIONS.values())
  for template in templates:
    text = template.format(name="", city="", job="", other="")
    words.update(text.replace(".", " ").replace("?", " ").lower().split())
  words.update(JOBS)
  for names in POOLS.values():
    words.update(names)
  words.update(("yes", "no"))
  return list(SPECIAL_TOKENS) + list(PUNCTUATION) + sorted(words)


def make_example(rng: random.Random, example_id: str,
                 num_paragraphs: int = 4, filler_prob: float = 0.5) -> dict:
  """One released-format record (see the module docstring)."""
  names = [n.capitalize() for n in rng.sample(POOLS["person"],
                                              num_paragraphs)]
  cities = [c.capitalize() for c in rng.sample(POOLS["city"],
                                               num_paragraphs)]
  jobs = [rng.choice(JOBS) for _ in range(num_paragraphs)]
  kind = rng.choice(tuple(QUESTIONS))
  subject = rng.randrange(num_paragraphs)
  other = rng.choice([i for i in range(num_paragraphs) if i != subject])
  if kind == "same_city" and rng.random() < 0.5:
    cities[other] = cities[subject]

  context, born_at, job_at = [], {}, {}
  for i, name in enumerate(names):
    sentences = [("born", BORN.format(name=name, city=cities[i])),
                 ("job", WORKS.format(name=name, job=jobs[i]))]
    if rng.random() < filler_prob:
      sentences.append(("filler", rng.choice(FILLERS).format(name=name)))
    rng.shuffle(sentences)
    born_at[i] = [k for k, _ in sentences].index("born")
    job_at[i] = [k for k, _ in sentences].index("job")
    context.append([name, [s for _, s in sentences]])

  if kind == "born":
    question = QUESTIONS["born"].format(name=names[subject])
    answer, qtype = cities[subject], "bridge"
    facts = [[names[subject], born_at[subject]]]
  elif kind == "job":
    asked = jobs[subject] if rng.random() < 0.5 else rng.choice(
        [j for j in JOBS if j != jobs[subject]])
    question = QUESTIONS["job"].format(name=names[subject], job=asked)
    answer = "yes" if asked == jobs[subject] else "no"
    qtype = "comparison"
    facts = [[names[subject], job_at[subject]]]
  else:
    question = QUESTIONS["same_city"].format(name=names[subject],
                                             other=names[other])
    answer = "yes" if cities[subject] == cities[other] else "no"
    qtype = "comparison"
    facts = [[names[subject], born_at[subject]],
             [names[other], born_at[other]]]
  order = list(range(num_paragraphs))
  rng.shuffle(order)
  return {
      "_id": example_id,
      "question": question,
      "answer": answer,
      "type": qtype,
      "level": "easy",
      "supporting_facts": facts,
      "context": [context[i] for i in order],
  }


def make_split(num_examples: int, seed: int, split: str,
               **kwargs) -> List[dict]:
  rng = common.split_rng(seed, split)
  return [make_example(rng, f"SYN_{split}_{i}", **kwargs)
          for i in range(num_examples)]


def write_dataset(output_dir: str, num_train: int = 2000, num_dev: int = 300,
                  seed: int = 0, num_paragraphs: int = 4) -> Dict[str, str]:
  """Writes the two JSON files and vocab.txt; returns their paths."""
  splits = {split: (name, make_split(count, seed, split,
                                     num_paragraphs=num_paragraphs))
            for split, name, count in (("train", TRAIN_FILE, num_train),
                                       ("dev", DEV_FILE, num_dev))}
  return common.write_dataset(output_dir, splits, vocabulary())


def chance_joint_f1(gold: Sequence[Dict[str, Any]], seed: int = 0) -> float:
  """Joint F1 of a question-blind guess: the relation the question asks
  about (birth / job) is read, but the person is random, "yes"/"no" is a coin
  and a span answer is that person's city. The level the demo must beat."""
  rng = random.Random(seed)
  answers, sps = {}, {}
  for record in gold:
    people = [(title, sentences) for title, sentences in record["context"]]
    asks_job = record["question"].startswith("Does")
    k = 1 if record["question"].startswith(("Where", "Does")) else 2
    picked = rng.sample(people, k)
    sp = []
    for title, sentences in picked:
      for j, sentence in enumerate(sentences):
        if (" works as " in sentence) == asks_job and (
            " born in " in sentence or asks_job):
          sp.append([title, j])
    if record["question"].startswith("Where"):
      born = [s for s in picked[0][1] if " born in " in s][0]
      answers[record["_id"]] = born.rsplit(" ", 1)[1].rstrip(".")
    else:
      answers[record["_id"]] = rng.choice(("yes", "no"))
    sps[record["_id"]] = sp
  return evaluate.evaluate({"answer": answers, "sp": sps}, gold)["joint_f1"]


if __name__ == "__main__":
  # Flags only when run as a binary: the demo defines flags of the same names.
  common.define_dataset_flags(num_train=2000, num_dev=300)
  flags.DEFINE_integer("num_paragraphs", 4, "Paragraphs (people) per record.")
  cli.run(common.dataset_main(write_dataset, "num_paragraphs"))
