"""Tiny OpenKP files in the released format, for the OpenKP tests
(`tests/tasks/openkp/`).

Each document has 3-5 VDOM elements; the first is a bold heading (larger
font) whose words are the gold keyphrase, so the phrase is learnable from the
text and from the visual features alike.
"""

import json
import os
import random
from typing import Any, Dict, List, Optional, Sequence

from tokenization_testing import write_test_vocab

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
