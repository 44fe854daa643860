r"""Synthetic multi-hop WikiHop data: the project's embedded demo data set.

  python -m demos.wikihop.synthetic --output_dir=DIR \
      [--num_train=2000 --num_dev=300 --seed=0 --hops=2]

writes `DIR/train.json` and `DIR/dev.json` in the exact qangaroo format
(one JSON array of {id, query, candidates, answer, supports}) and
`DIR/vocab.txt`, a BERT-style uncased WordPiece vocabulary covering every
word ([PAD]=0, [unused0..9]=1..10, [UNK], [CLS], [SEP], [MASK], punctuation,
then words), so the WordPiece default global token ids (1, 3, 4, 5 =
[unused0], [unused2], [unused3], [unused4]) are free special tokens.

The reasoning chain. Each example has N candidates (4 or 5 countries). Every
candidate country k is the end of its own chain of `hops` facts, one fact per
document:

  village V_k --(doc)--> city C_k --(doc)--> country K_k        (hops=2)
  village V_k -> city C_k -> region R_k -> country K_k          (hops=3)

e.g. "Tamoli is near Berunda." / "Berunda lies in Kasovia." The query names
ONE village, `country_of tamoli`, and the answer is the country at the end
of that village's chain. Documents (one per fact, sometimes with a neutral
filler sentence) are shuffled, and so are the candidates.

Why it cannot be shortcut:
- The query alone says nothing: names are re-drawn for every example from
  fixed pools, and which village leads to which country is random.
- Every candidate is mentioned exactly once in the documents, in a sentence
  of the same template as every other candidate, and every chain has the same
  length and shape: counting mentions, picking by sentence form, or looking
  for the "city mentioned twice" all tie across candidates.
- Candidate order and document order are shuffled independently, so position
  (first candidate, candidate of the first / last document) is at chance.
- The only asymmetry is the query village, which appears in exactly one
  document; reaching the answer means following that village's city to the
  one other document that mentions the city (and on, for hops=3), i.e.
  reading two (three) documents in sequence.
Chance accuracy is 1/N <= 0.25.

How deep a model must be. In ETC the global tokens carry no content at the
input (their ids are the special candidate/question/sentence ids), so with a
per-global-token output head the chain takes four attention steps: (1) each
sentence token gathers its sentence (with the featurizer's
`mark_query_subject`, the village's sentence then carries the subject's
token type); (2) the bridge city's mention in the other document finds, by
content, the sentence token that holds the same city and the subject's mark;
(3) the country mention reads that city next to it; (4) the candidate's
global token reads its linked mention. The demo uses 4 layers. hops=1 (one
fact per candidate, found only by matching the query village among
distractor documents) is within reach of a 2-layer model.

Sizes fit the demo model (long 128, global 48): with 5 candidates and
hops=2 an example has 10 short documents, at most ~112 wordpieces and <= 40
global tokens. Everything is deterministic given --seed (the name pools and the
vocabulary do not depend on it).
"""

import random
from typing import Dict, List, Sequence

from absl import flags

from demos import common
from etc_realformer import cli

# Name pools are built from syllables with their own fixed seed, so the
# vocabulary is the same for every data seed.
_POOL_SEED = 1234

ENTITY_TYPES = ("village", "city", "region", "country")
POOL_SIZES = {"village": 150, "city": 150, "region": 100, "country": 60}

# Fact templates per link (head type, tail type): same shape for every chain.
# Short on purpose: a sentence's global token starts as roughly the average
# of its tokens, and following the chain means matching the bridge name
# between such averages across documents. In "Tamoli is near Berunda." the
# bridge is a fifth of that average; in the 10-token templates of earlier
# versions ("Tamoli is a village in the city of Berunda.") it was a tenth,
# and a tiny model trained from scratch did not find the match
# (docs/wikihop_demo.md, "Short fact sentences").
TEMPLATES = {
    ("village", "country"): (
        "{head} is in {tail}.",
        "{head} lies in {tail}.",
    ),
    ("village", "city"): (
        "{head} is near {tail}.",
        "{head} lies by {tail}.",
    ),
    ("city", "region"): (
        "{head} is within {tail}.",
        "{head} lies within {tail}.",
    ),
    ("city", "country"): (
        "{head} is in {tail}.",
        "{head} lies in {tail}.",
    ),
    ("region", "country"): (
        "{head} belongs to {tail}.",
        "{head} is part of {tail}.",
    ),
}
FILLERS = (
    "It has an old market.",
    "Many people visit it in summer.",
    "The river there is wide.",
    "It is known for its bridge.",
)
QUERY_RELATION = "country_of"
SPECIAL_TOKENS = ("[PAD]",) + tuple(f"[unused{i}]" for i in range(10)) + (
    "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PUNCTUATION = (".", ",", "_", "'", "-")


POOLS = common.name_pools(_POOL_SEED, POOL_SIZES)


def chain_types(hops: int) -> Sequence[str]:
  if hops == 1:
    return ("village", "country")
  if hops == 2:
    return ("village", "city", "country")
  if hops == 3:
    return ("village", "city", "region", "country")
  raise ValueError(f"hops must be 1, 2 or 3, got {hops}")


def vocabulary() -> List[str]:
  """Every wordpiece the generated text needs, BERT-style ordering."""
  words = set()
  for templates in TEMPLATES.values():
    for template in templates:
      words.update(template.format(head="", tail="").replace(".", " ")
                   .split())
  for filler in FILLERS:
    words.update(filler.replace(".", " ").split())
  words.update(QUERY_RELATION.split("_"))
  words = {w.lower() for w in words}
  for names in POOLS.values():
    words.update(names)
  return list(SPECIAL_TOKENS) + list(PUNCTUATION) + sorted(words)


def make_example(rng: random.Random, example_id: str, hops: int = 2,
                 num_candidates: Sequence[int] = (4, 5),
                 filler_prob: float = 0.3) -> dict:
  """One qangaroo-format record (see the module docstring)."""
  types = chain_types(hops)
  n = rng.choice(tuple(num_candidates))
  # Distinct names per type within the example; one chain per candidate.
  names = {t: rng.sample(POOLS[t], n) for t in types}
  chains = [[names[t][k] for t in types] for k in range(n)]
  supports = []
  for chain in chains:
    for level in range(hops):
      head, tail = chain[level], chain[level + 1]
      template = rng.choice(TEMPLATES[(types[level], types[level + 1])])
      sentences = [template.format(head=head.capitalize(),
                                   tail=tail.capitalize())]
      if rng.random() < filler_prob:
        filler = rng.choice(FILLERS)
        sentences.insert(rng.randrange(2), filler)
      supports.append(" ".join(sentences))
  rng.shuffle(supports)
  answer_chain = rng.randrange(n)
  candidates = [chain[-1] for chain in chains]
  rng.shuffle(candidates)
  return {
      "id": example_id,
      "query": f"{QUERY_RELATION} {chains[answer_chain][0]}",
      "candidates": candidates,
      "answer": chains[answer_chain][-1],
      "supports": supports,
  }


def query_chain(record: dict) -> List[str]:
  """The names along the query's chain, read back from a record's text.

  Starts at the query's village and follows, fact sentence by fact sentence
  ("<head> ... <tail>."), to the answer: [village, city, country] for
  hops=2. For analysis and tests (e.g. which tokens are the bridge).
  """
  facts = {}
  for doc in record["supports"]:
    for sentence in doc.split(". "):
      words = sentence.rstrip(".").lower().split()
      if words:
        facts.setdefault(words[0], words[-1])
  chain = [record["query"].split()[-1]]
  while chain[-1] != record["answer"] and chain[-1] in facts:
    chain.append(facts[chain[-1]])
  return chain


def make_split(num_examples: int, seed: int, split: str, hops: int = 2,
               **kwargs) -> List[dict]:
  rng = common.split_rng(seed, split)
  return [make_example(rng, f"SYN_{split}_{i}", hops=hops, **kwargs)
          for i in range(num_examples)]


def write_dataset(output_dir: str, num_train: int = 2000, num_dev: int = 300,
                  seed: int = 0, hops: int = 2) -> Dict[str, str]:
  """Writes train.json, dev.json and vocab.txt; returns their paths."""
  splits = {split: (f"{split}.json", make_split(count, seed, split, hops))
            for split, count in (("train", num_train), ("dev", num_dev))}
  return common.write_dataset(output_dir, splits, vocabulary())


if __name__ == "__main__":
  # Flags only when run as a binary: the demo defines flags of the same names.
  common.define_dataset_flags(num_train=2000, num_dev=300)
  flags.DEFINE_integer(
      "hops", 2, "Facts per chain: 2 or 3 (multi-hop), or 1 (single-fact "
      "lookup among distractor documents, for models too shallow for 2).")
  cli.run(common.dataset_main(write_dataset, "hops"))
