"""The golden vector made by the original ETC code (tests/data/official_etc_small).

Loads the released-format checkpoint through the public API and reproduces
the original encoder's outputs on both attention paths.
"""

import numpy as np
import pytest

from etc_realformer import EtcConfig, EtcModel, load_official_checkpoint
from etc_realformer.checkpoints import official
from conftest import GOLDEN_DIR

FEATURE_KEYS = ("token_ids", "global_token_ids", "segment_ids",
                "global_segment_ids", "l2l_att_mask", "g2g_att_mask",
                "l2g_att_mask", "g2l_att_mask", "l2l_relative_att_ids",
                "g2g_relative_att_ids", "l2g_relative_att_ids",
                "g2l_relative_att_ids")


@pytest.fixture(scope="module")
def golden_dir_module():
  return GOLDEN_DIR


@pytest.fixture(scope="module")
def golden(golden_dir_module):
  ref = np.load(golden_dir_module / "reference.npz")
  config = EtcConfig.from_json_file(str(golden_dir_module / "etc_config.json"))
  model = EtcModel(config)
  load_official_checkpoint(model, str(golden_dir_module / "model.ckpt"))
  return config, model, ref



@pytest.mark.parametrize("impl,suffix", [("full", ""), ("sparse", "_sparse"),
                                         ("auto", "")])
def test_reproduces_original_outputs(golden, impl, suffix):
  _, model, ref = golden
  feats = {k: ref[k] for k in FEATURE_KEYS}
  long_out, global_out = model(feats, training=False, att_implementation=impl)
  np.testing.assert_allclose(long_out, ref["long_output" + suffix], atol=1e-5,
                             rtol=0)
  np.testing.assert_allclose(global_out, ref["global_output" + suffix],
                             atol=1e-5, rtol=0)


def test_sparse_via_config(golden):
  config, model, ref = golden
  model2 = EtcModel(config.replace(att_implementation="sparse"))
  model2.build()
  for (name, var) in model.official_variables().items():
    model2.official_variables()[name].assign(var)
  feats = {k: ref[k] for k in FEATURE_KEYS}
  long_out, _ = model2(feats)
  np.testing.assert_allclose(long_out, ref["long_output_sparse"], atol=1e-5,
                             rtol=0)


def test_variable_names_match_released_list(golden, golden_dir_module):
  config, model, _ = golden
  listed = {}
  for line in (golden_dir_module / "variables.txt").read_text().splitlines():
    name, shape = line.split("\t")
    listed[name] = eval(shape)  # "[32, 64]"
  ours = {k: v.shape.as_list() for k, v in model.official_variables().items()}
  assert ours == listed


def test_loads_from_directory_and_index_path(golden, golden_dir_module):
  config, _, _ = golden
  for path in (golden_dir_module, golden_dir_module / "model.ckpt.index"):
    model = EtcModel(config)
    report = load_official_checkpoint(model, str(path))
    assert len(report.loaded) == 54
  assert official.is_official_checkpoint(str(golden_dir_module))
