"""etc-realformer: ETC (global-local attention) with RealFormer residual
attention, in TensorFlow 2 / tf_keras.

Public API::

  from etc_realformer import (EtcConfig, ExecutionConfig, EtcModel,
                              make_global_local_side_inputs,
                              load_official_checkpoint)
  from etc_realformer import BertConfig, BertModel, load_bert_checkpoint
"""

import os

# Keras 2 only (tf_keras): with this set before TensorFlow loads, `tf.keras`
# is tf_keras and TensorFlow's import skips Keras 3, a quarter of its time.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import importlib

from etc_realformer.bert_config import BertConfig
from etc_realformer.config import EtcConfig
from etc_realformer.execution import ExecutionConfig
from etc_realformer.version import __version__

# Name -> module, imported on first use so that `import etc_realformer` stays
# light (tools that only read configs do not pay for building layers).
_LAZY = {
    "EtcModel": "etc_realformer.networks.etc_model",
    "make_global_local_side_inputs": "etc_realformer.features.side_inputs",
    "make_multihop_side_inputs": "etc_realformer.features.multihop",
    "make_fixed_block_side_inputs": "etc_realformer.features.side_inputs",
    "load_official_checkpoint": "etc_realformer.checkpoints.official",
    "BertModel": "etc_realformer.networks.bert_model",
    "load_bert_checkpoint": "etc_realformer.checkpoints.bert",
    "official_variable_names": "etc_realformer.checkpoints.official",
}

__all__ = ["BertConfig", "EtcConfig", "ExecutionConfig", "__version__",
           *_LAZY]


def __getattr__(name):
  if name in _LAZY:
    return getattr(importlib.import_module(_LAZY[name]), name)
  raise AttributeError(f"module 'etc_realformer' has no attribute {name!r}")
