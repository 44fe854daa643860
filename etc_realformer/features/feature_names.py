"""The raw feature names of ETC's inputs, declared once.

The library's side inputs (`side_input_sources`), the featurizers
(`tasks/common/segments.py`) and the tasks' feature specs all spell them
through these.
"""

TOKEN_IDS = "token_ids"
SEGMENT_IDS = "segment_ids"
GLOBAL_TOKEN_IDS = "global_token_ids"
GLOBAL_SEGMENT_IDS = "global_segment_ids"
LONG_BREAKPOINTS = "long_breakpoints"
GLOBAL_BREAKPOINTS = "global_breakpoints"
SENTENCE_IDS = "sentence_ids"
LONG_INPUT_MASK = "long_input_mask"
GLOBAL_INPUT_MASK = "global_input_mask"
LONG_SENTENCE_IDS = "long_sentence_ids"
LONG_PARAGRAPH_BREAKPOINTS = "long_paragraph_breakpoints"
LONG_PARAGRAPH_IDS = "long_paragraph_ids"
GLOBAL_PARAGRAPH_BREAKPOINTS = "global_paragraph_breakpoints"
IGNORE_HARD_G2L_MASK = "ignore_hard_g2l_mask"
L2G_LINKED_IDS = "l2g_linked_ids"
