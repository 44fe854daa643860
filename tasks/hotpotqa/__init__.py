"""HotpotQA (distractor setting): reading, featurization, decoding, metric."""
