"""The logit of an excluded choice, shared by the task heads and decoders.

A head masks what cannot be chosen (padding candidates, cells past the last
word, spans outside the document) by setting its logit to `NEG_INF`.
"""

# Far below any real logit: a softmax gives it exactly 0 in float32, and
# `logits > NEG_INF / 2` tells real logits from excluded ones. It stays
# finite, so masked logits never make inf - inf = NaN. (The encoder's
# attention masks add -10000 instead, `attention/masks.MASK_ADDER`,
# which float16 can hold.)
NEG_INF = -1e9
