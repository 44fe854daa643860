"""The raw feature names: each declared once, and every side-input source
reads only declared names."""

from etc_realformer.features import feature_names
from etc_realformer.features import side_input_sources


def _declared():
  return {k: v for k, v in vars(feature_names).items() if k.isupper()}


def test_names_are_distinct_and_spelled_as_declared():
  declared = _declared()
  assert len(set(declared.values())) == len(declared)
  assert all(value == name.lower() for name, value in declared.items())


def test_every_source_reads_declared_names():
  declared = set(_declared().values())
  for source, needed in side_input_sources.SOURCE_FEATURES.items():
    assert set(needed) <= declared, source
