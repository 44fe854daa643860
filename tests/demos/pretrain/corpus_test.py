"""Tests for demos/pretrain/corpus.py: documents of prose from the Python
documentation topics, in BERT's layout."""

from demos.pretrain import corpus
from tasks.common.inputs import record_stats
from tasks.pretrain import data


def test_documents_are_prose_sentences(tmp_path):
  docs = corpus.documents()
  assert len(docs) > 150
  sentences = [s for _, doc in docs for s in doc]
  assert len(sentences) > 2500
  assert not any(s.startswith((">>>", "...")) or "::=" in s
                 for s in sentences)
  # Headings are not text: the assignment statement's section name heads
  # its document, its first sentence is prose.
  names = [name for name, _ in docs]
  assert "assignment/Assignment statements" in names
  first = dict(docs)["assignment/Assignment statements"][0]
  assert first.startswith("Assignment statements are used to (re)bind")
  path = str(tmp_path / "corpus.txt")
  counts = corpus.write_corpus(path, max_documents=5)
  assert counts["documents"] == 5
  read = list(data.read_documents(path, record_stats.RecordStats(strict=True)))
  assert [d.sentences for d in read] == [doc for _, doc in docs[:5]]
