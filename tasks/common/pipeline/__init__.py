"""The preprocess skeleton, single-process and as an Apache Beam pipeline."""
