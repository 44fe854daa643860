"""Records -> fixed-shape features: segments, tokenizers, sentences."""
