"""The project's own (TF2) encoder checkpoints: config and weights round trip."""

import numpy as np

from encoder_testing import random_features, tiny_config, tiny_model
from etc_realformer import EtcModel
from etc_realformer.checkpoints.converted import (load_converted_checkpoint,
                                                  read_config,
                                                  save_converted_checkpoint)


def test_round_trip(tmp_path):
  source = tiny_model(tiny_config(residual_attention=True))
  save_converted_checkpoint(source, str(tmp_path))
  config = read_config(str(tmp_path))
  assert config.to_dict() == source.config.to_dict()
  target = EtcModel(config)
  load_converted_checkpoint(target, str(tmp_path))
  feats = random_features(config, batch=1, long_len=7, global_len=2)
  for a, b in zip(source(feats), target(feats)):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
