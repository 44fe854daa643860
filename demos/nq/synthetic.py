r"""Synthetic Natural Questions files in the released formats (tests, demos).

  python -m demos.nq.synthetic --output_dir=DIR [--num_train=200 \
      --num_dev=50 --seed=0 --num_filler=6]

writes, deterministically for a seed:

* `DIR/nq-train-00.jsonl.gz`: full format (document_html, document_tokens
  with html_token and bytes, long_answer_candidates with top_level and bytes,
  ONE annotation per example);
* `DIR/nq-dev-00.jsonl.gz`: the same with FIVE annotations of varied
  agreement (the official scorer counts gold as answered when >= 2 of 5
  annotators answered: dev has examples with 0..5 answering annotators);
* `DIR/simplified-nq-train.jsonl.gz`: the training set in the simplified
  format (`document_text`, no bytes, as `natural_questions.text_utils`);
* `DIR/vocab.txt`: a BERT-shaped uncased WordPiece vocabulary ([PAD]=0,
  [unused0..98]=1..99, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103,
  [unused99..103]=104..108, punctuation, then every word), so the original
  NQ ids apply unchanged ([unused102]/[unused103] HTML tags 107/108,
  question global token 35, sentence global token 1).

Each document is about one entity (a made-up name) and holds, in shuffled
order after an `<H1>` title (outside every candidate): an intro paragraph,
one fact paragraph per attribute it has ("<P> the river of Tamoli is Berunda
. </P>"), filler paragraphs, a `<Table>` whose `<Tr>` rows are nested
(non-top-level) candidates (sometimes holding the asked fact as
"<Tr> <Td> river </Td> <Td> Berunda </Td> </Tr>") and a `<Ul>` with nested
`<Li>` items. Question kinds (`KINDS`):

* short: "what is the river of tamoli" -> short answer = the value token
  after the attribute word; long answer = its paragraph (or table row);
* yes/no: "is the river of tamoli berunda" -> YES / NO, long answer = the
  fact paragraph, no short answer;
* long: "tell me about the river of tamoli" -> long answer only;
* null: asks for an attribute the document does not have -> no answer.

The attribute word and the entity in the question pick the one right
paragraph, so the answers are learnable. With `--num_filler` filler
paragraphs a document has ~150-300 tokens: several windows at a small
`long_seq_len` (64-128), and answers outside some windows.
"""

import gzip
import json
import os
import random
from typing import Any, Dict, List, Optional, Sequence, Tuple

from absl import flags

from demos import common
from etc_realformer import cli
from tasks.common import output_files
from tasks.common.featurization import tokenization
from tasks.nq import data

TRAIN_FILE = "nq-train-00.jsonl.gz"
DEV_FILE = "nq-dev-00.jsonl.gz"
SIMPLIFIED_TRAIN_FILE = "simplified-nq-train.jsonl.gz"

SHORT, YES_NO, LONG, NULL = "short", "yes_no", "long", "null"
KINDS = (SHORT, YES_NO, LONG, NULL)
KIND_WEIGHTS = (0.45, 0.15, 0.15, 0.25)

_POOL_SEED = 2718
POOL_SIZES = {"entity": 150, "value": 80}
ATTRIBUTES = ("river", "mayor", "color", "animal", "sport", "dish", "song",
              "flower", "king", "mountain", "festival", "bird")
KIND_WORDS = ("city", "village", "island", "valley", "kingdom")
FILLER_WORDS = ("people", "often", "walk", "near", "old", "houses", "many",
                "travel", "there", "during", "summer", "winter", "markets",
                "open", "early", "children", "play", "music", "roads", "long",
                "quiet", "small", "bridges", "cross", "fields", "green",
                "stone", "walls", "stand", "still")
SPECIAL_TOKENS = (("[PAD]",) + tuple(f"[unused{i}]" for i in range(99)) +
                  ("[UNK]", "[CLS]", "[SEP]", "[MASK]") +
                  tuple(f"[unused{i}]" for i in range(99, 104)))
PUNCTUATION = (".", ",", "?", "<", ">", "/", "-", "_", "=", '"')
QUESTION_WORDS = ("what", "is", "the", "of", "tell", "me", "about", "a",
                  "it", "has", "name", "called")
# HTML tag names the documents use (tokenized only if a tag ever reaches the
# tokenizer as text, e.g. without html flags).
TAG_WORDS = ("h1", "p", "table", "tr", "td", "ul", "li")


POOLS = common.name_pools(
    _POOL_SEED, POOL_SIZES,
    used=(ATTRIBUTES + KIND_WORDS + FILLER_WORDS + QUESTION_WORDS +
          TAG_WORDS))


def vocabulary() -> List[str]:
  """Every wordpiece the generated text needs, BERT-style ordering."""
  words = set(ATTRIBUTES + KIND_WORDS + FILLER_WORDS + QUESTION_WORDS +
              TAG_WORDS)
  for names in POOLS.values():
    words.update(names)
  return list(SPECIAL_TOKENS) + list(PUNCTUATION) + sorted(words)


# ------------------------------------------------------------------ document
class _Doc:
  """Token list builder that records candidates as elements are closed."""

  def __init__(self):
    self.tokens: List[Tuple[str, bool]] = []
    self.candidates: List[Dict[str, Any]] = []

  def text(self, words: Sequence[str]) -> None:
    self.tokens.extend((w, False) for w in words)

  def open(self, tag: str) -> int:
    self.tokens.append((f"<{tag}>", True))
    return len(self.tokens) - 1

  def close(self, tag: str, start: int, candidate: bool,
            top_level: bool) -> Optional[int]:
    self.tokens.append((f"</{tag}>", True))
    if not candidate:
      return None
    self.candidates.append(dict(start_token=start,
                                end_token=len(self.tokens),
                                top_level=top_level))
    return len(self.candidates) - 1


def _filler(rng: random.Random, low: int = 6, high: int = 14) -> List[str]:
  return [rng.choice(FILLER_WORDS) for _ in range(rng.randint(low, high))]


def make_example(rng: random.Random, example_id: int, num_annotations: int,
                 num_filler: int = 6) -> Dict[str, Any]:
  """One full-format NQ record (see the module docstring)."""
  entity = rng.choice(POOLS["entity"])
  attrs = rng.sample(ATTRIBUTES, 5)
  present, absent = attrs[:4], attrs[4]
  values = {a: rng.choice(POOLS["value"]) for a in present}
  kind = rng.choices(KINDS, KIND_WEIGHTS)[0]
  asked = absent if kind == NULL else rng.choice(present)
  in_table = kind in (SHORT, LONG) and rng.random() < 0.25
  yes = rng.random() < 0.5

  # Blocks, shuffled: ("p", words) paragraphs, ("table", rows),
  # ("ul", items). The asked fact is marked.
  blocks: List[Tuple[str, Any, bool]] = []
  blocks.append(("p", [entity, "is", "a", rng.choice(KIND_WORDS), "."] +
                 _filler(rng, 3, 8) + ["."], False))
  for a in present:
    if a == asked and in_table:
      continue
    blocks.append(("p", ["the", a, "of", entity, "is", values[a], "."] +
                   (_filler(rng, 2, 6) + ["."] if rng.random() < 0.5
                    else []), a == asked))
  for _ in range(num_filler):
    blocks.append(("p", _filler(rng) + ["."], False))
  rows = [[rng.choice(FILLER_WORDS), rng.choice(POOLS["value"])]
          for _ in range(rng.randint(1, 3))]
  asked_row = -1
  if in_table:
    asked_row = rng.randrange(len(rows) + 1)
    rows.insert(asked_row, [asked, values[asked]])
  blocks.append(("table", rows, in_table))
  blocks.append(("ul", [_filler(rng, 2, 5) for _ in range(rng.randint(2, 3))],
                 False))
  rng.shuffle(blocks)

  doc = _Doc()
  h1 = doc.open("H1")
  doc.text([entity])
  doc.close("H1", h1, candidate=False, top_level=False)
  answer: Dict[str, Any] = {}
  for tag, content, is_answer in blocks:
    if tag == "p":
      start = doc.open("P")
      doc.text(content)
      if is_answer:
        # The value follows "the {attr} of {entity} is".
        answer["short"] = (start + 6, start + 7)
      index = doc.close("P", start, candidate=True, top_level=True)
      if is_answer:
        answer["long"] = index
    elif tag == "table":
      start = doc.open("Table")
      row_candidates = []
      for r, (key, value) in enumerate(content):
        tr = doc.open("Tr")
        for c, cell in enumerate((key, value)):
          td = doc.open("Td")
          doc.text([cell])
          doc.close("Td", td, candidate=False, top_level=False)
          if r == asked_row and c == 1:
            answer["short"] = (len(doc.tokens) - 2, len(doc.tokens) - 1)
        row_candidates.append(doc.close("Tr", tr, candidate=True,
                                        top_level=False))
      doc.close("Table", start, candidate=True, top_level=True)
      if asked_row >= 0:
        answer["long"] = row_candidates[asked_row]
    else:
      start = doc.open("Ul")
      for item in content:
        li = doc.open("Li")
        doc.text(item)
        doc.close("Li", li, candidate=True, top_level=False)
      doc.close("Ul", start, candidate=True, top_level=True)
  # Candidates are listed in document order of their start, as released.
  order = sorted(range(len(doc.candidates)),
                 key=lambda i: doc.candidates[i]["start_token"])
  remap = {old: new for new, old in enumerate(order)}
  candidates = [doc.candidates[i] for i in order]
  if "long" in answer:
    answer["long"] = remap[answer["long"]]

  # HTML with the byte offsets of every token.
  html_prefix = "<html><body>"
  parts, offsets, at = [], [], len(html_prefix.encode("utf-8"))
  for token, _ in doc.tokens:
    size = len(token.encode("utf-8"))
    offsets.append((at, at + size))
    parts.append(token)
    at += size + 1
  html = html_prefix + " ".join(parts) + "</body></html>"
  tokens = [dict(token=t, start_byte=s, end_byte=e, html_token=h)
            for (t, h), (s, e) in zip(doc.tokens, offsets)]
  for c in candidates:
    c["start_byte"] = offsets[c["start_token"]][0]
    c["end_byte"] = offsets[c["end_token"] - 1][1]

  if kind == SHORT:
    question = f"what is the {asked} of {entity}"
  elif kind == YES_NO:
    other = rng.choice([v for v in POOLS["value"] if v != values[asked]])
    question = f"is the {asked} of {entity} {values[asked] if yes else other}"
  elif kind == LONG:
    question = f"tell me about the {asked} of {entity}"
  else:
    question = f"what is the {asked} of {entity}"

  def span(start_token, end_token):
    if start_token < 0:
      return dict(start_token=-1, end_token=-1, start_byte=-1, end_byte=-1)
    return dict(start_token=start_token, end_token=end_token,
                start_byte=offsets[start_token][0],
                end_byte=offsets[end_token - 1][1])

  def annotation(answers: bool, with_short: bool, wrong_long: bool = False):
    if not answers:
      long_answer = dict(span(-1, -1), candidate_index=-1)
      return dict(long_answer=long_answer, short_answers=[],
                  yes_no_answer="NONE")
    if wrong_long:  # a stray annotator on an unanswerable question
      index = rng.randrange(len(candidates))
    else:
      index = answer["long"]
    c = candidates[index]
    long_answer = dict(span(c["start_token"], c["end_token"]),
                       candidate_index=index)
    shorts = []
    yes_no = "NONE"
    if kind == YES_NO and not wrong_long:
      yes_no = "YES" if yes else "NO"
    elif kind == SHORT and with_short and not wrong_long:
      shorts = [span(*answer["short"])]
    return dict(long_answer=long_answer, short_answers=shorts,
                yes_no_answer=yes_no)

  annotations = []
  if num_annotations == 1:
    annotations.append(annotation(kind != NULL, with_short=True))
  else:
    if kind == NULL:
      answering = rng.choices((0, 1), (0.7, 0.3))[0]
    else:
      answering = rng.choices((1, 2, 3, 4, 5), (0.1, 0.2, 0.2, 0.2, 0.3))[0]
    flags_ = [i < answering for i in range(num_annotations)]
    rng.shuffle(flags_)
    for answers in flags_:
      with_short = rng.random() < 0.85
      annotations.append(annotation(answers, with_short,
                                    wrong_long=kind == NULL))
  for a in annotations:
    a["annotation_id"] = rng.getrandbits(62)

  return {
      "example_id": example_id,
      "question_text": question,
      "document_url": f"https://en.wikipedia.org//w/index.php?title={entity}",
      "document_title": entity,
      "document_html": html,
      "document_tokens": tokens,
      "long_answer_candidates": candidates,
      "annotations": annotations,
  }


def simplify(record: Dict[str, Any]) -> Dict[str, Any]:
  """The simplified format of a full record (as `text_utils`): tokens joined
  by spaces (blanks inside a token become "_"), no bytes, no HTML."""
  def strip(span: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in span.items()
            if k not in ("start_byte", "end_byte")}

  return {
      "question_text": record["question_text"],
      "example_id": record["example_id"],
      "document_url": record["document_url"],
      "document_text": " ".join(t["token"].replace(" ", "_")
                                for t in record["document_tokens"]),
      "long_answer_candidates": [strip(c)
                                 for c in record["long_answer_candidates"]],
      "annotations": [dict(a, long_answer=strip(a["long_answer"]),
                           short_answers=[strip(s)
                                          for s in a["short_answers"]])
                      for a in record["annotations"]],
  }


def make_split(num_examples: int, seed: int, split: str,
               num_filler: int = 6) -> List[Dict[str, Any]]:
  rng = common.split_rng(seed, split)
  num_annotations = 5 if split == "dev" else 1
  ids = set()
  out = []
  for _ in range(num_examples):
    example_id = rng.getrandbits(64) - 2**63
    while example_id in ids:
      example_id = rng.getrandbits(64) - 2**63
    ids.add(example_id)
    out.append(make_example(rng, example_id, num_annotations, num_filler))
  return out


def write_dataset(output_dir: str, num_train: int = 200, num_dev: int = 50,
                  seed: int = 0, num_filler: int = 6,
                  bad_train_lines: bool = False) -> Dict[str, str]:
  """Writes the NQ files and vocab.txt; returns their paths by name
  ("train", "dev", "simplified_train", "vocab").

  `bad_train_lines` appends two bad lines to the training file (one not JSON,
  one with a candidate past the document's end), for tests of the skip
  policy.
  """
  os.makedirs(output_dir, exist_ok=True)
  train = make_split(num_train, seed, "train", num_filler)
  dev = make_split(num_dev, seed, "dev", num_filler)
  paths = {"train": os.path.join(output_dir, TRAIN_FILE),
           "dev": os.path.join(output_dir, DEV_FILE),
           "simplified_train": os.path.join(output_dir, SIMPLIFIED_TRAIN_FILE),
           "vocab": os.path.join(output_dir, "vocab.txt")}
  train_lines: List[Any] = list(train)
  if bad_train_lines and train:
    broken = json.loads(json.dumps(train[0]))
    broken["example_id"] = 1
    broken["long_answer_candidates"][0]["end_token"] = 10**6
    train_lines.append(broken)
  output_files.write_jsonl(paths["train"], train_lines)
  if bad_train_lines:
    # A line that is not JSON, after the others (must not stop the file).
    with gzip.open(paths["train"], "ab") as f:
      f.write(b'{"example_id": 2, "question_text": "cut off\n')
  output_files.write_jsonl(paths["dev"], dev)
  output_files.write_jsonl(paths["simplified_train"], [simplify(r) for r in train])
  tokenization.write_vocab(paths["vocab"], vocabulary())
  return paths


if __name__ == "__main__":
  # Flags only when run as a binary: the demos define flags of the same names.
  common.define_dataset_flags(num_train=200, num_dev=50)
  flags.DEFINE_integer("num_filler", 6, "Filler paragraphs per document.")
  cli.run(common.dataset_main(write_dataset, "num_filler"))
