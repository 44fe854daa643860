"""`EtcModel`: the golden vector of the original ETC, the two attention paths,
RealFormer residual attention, probabilities, gradient checkpointing, mixed
precision and XLA, input checks, and the from-scratch initialisation."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from conftest import GOLDEN_DIR
from encoder_testing import (assert_same_training, copy_weights,
                             loss_and_grads, max_abs_diff, model_weights,
                             numpy_reference, probes, random_features,
                             randomize_relative_bias, tiny_config, tiny_model,
                             twin_models)
from etc_realformer import (EtcConfig, EtcModel, ExecutionConfig,
                            load_official_checkpoint,
                            make_global_local_side_inputs)
from etc_realformer.attention import dropout as dropout_lib
from etc_realformer.features.relative_positions import own_sentence_id

GOLDEN_FEATURES = ("token_ids", "global_token_ids", "segment_ids",
                   "global_segment_ids", "l2l_att_mask", "g2g_att_mask",
                   "l2g_att_mask", "g2l_att_mask", "l2l_relative_att_ids",
                   "g2g_relative_att_ids", "l2g_relative_att_ids",
                   "g2l_relative_att_ids")


# ------------------------------------------------------------ golden vector
@pytest.fixture(scope="module")
def golden():
  ref = np.load(GOLDEN_DIR / "reference.npz")
  config = EtcConfig.from_json_file(str(GOLDEN_DIR / "etc_config.json"))
  model = EtcModel(config)
  load_official_checkpoint(model, str(GOLDEN_DIR / "model.ckpt"))
  return config, model, ref


@pytest.mark.parametrize("impl,suffix", [("full", ""), ("sparse", "_sparse"),
                                         ("auto", "")])
def test_reproduces_the_original_outputs(golden, impl, suffix):
  _, model, ref = golden
  feats = {k: ref[k] for k in GOLDEN_FEATURES}
  long_out, global_out = model(feats, training=False, att_implementation=impl)
  # Padding positions carry values too: compare all of them.
  np.testing.assert_allclose(long_out, ref["long_output" + suffix], atol=1e-5,
                             rtol=0)
  np.testing.assert_allclose(global_out, ref["global_output" + suffix],
                             atol=1e-5, rtol=0)


def test_sparse_path_chosen_by_execution_config(golden):
  config, model, ref = golden
  sparse = copy_weights(model, tiny_model(config,
                                          att_implementation="sparse"))
  long_out, _ = sparse({k: ref[k] for k in GOLDEN_FEATURES})
  np.testing.assert_allclose(long_out, ref["long_output_sparse"], atol=1e-5,
                             rtol=0)


@pytest.mark.parametrize("hard_g2l,hard_l2g", [(False, False), (True, False),
                                               (False, True), (True, True)])
def test_side_input_builders_drive_the_encoder(hard_g2l, hard_l2g):
  ref = np.load(GOLDEN_DIR / "reference.npz")
  config = EtcConfig.from_json_file(str(GOLDEN_DIR / "etc_config.json"))
  config = config.replace(use_hard_g2l_mask=hard_g2l,
                          use_hard_l2g_mask=hard_l2g)
  side = make_global_local_side_inputs(
      ref["long_breakpoints"], ref["global_breakpoints"], ref["sentence_ids"],
      local_radius=config.local_radius,
      relative_pos_max_distance=config.relative_pos_max_distance,
      use_hard_g2l_mask=config.use_hard_g2l_mask,
      use_hard_l2g_mask=config.use_hard_l2g_mask)
  model = EtcModel(config)
  feats = dict(token_ids=ref["token_ids"],
               global_token_ids=ref["global_token_ids"],
               segment_ids=ref["segment_ids"],
               global_segment_ids=ref["global_segment_ids"], **side)
  full = model(feats, att_implementation="full")
  sparse = model(feats, att_implementation="sparse")
  for a, b in zip(full, sparse):
    assert np.isfinite(a.numpy()).all()
    assert max_abs_diff(a, b) < 1e-5


# ---------------------------------------------------------------- the paths
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("radius,long_len", [(1, 7), (2, 12), (2, 13),
                                             (3, 16), (5, 9), (6, 5)])
def test_sparse_equals_full(residual, radius, long_len):
  # long_len covers multiples and non-multiples of the block length r + 1,
  # and a radius wider than the whole sequence.
  model = tiny_model(tiny_config(local_radius=radius,
                                 residual_attention=residual))
  randomize_relative_bias(model)
  feats = random_features(model.config, batch=2, long_len=long_len,
                          global_len=4, seed=radius * 100 + long_len)
  full = model(feats, att_implementation="full")
  sparse = model(feats, att_implementation="sparse")
  for a, b in zip(full, sparse):
    assert np.isfinite(a.numpy()).all() and np.isfinite(b.numpy()).all()
    assert max_abs_diff(a, b) < 1e-5


@pytest.mark.parametrize("length_rows", [0, 3])
def test_matches_numpy_reference_without_residual(length_rows):
  model = tiny_model(max_sentence_length_embeddings=length_rows)
  randomize_relative_bias(model)
  feats = random_features(model.config, batch=2, long_len=11, global_len=4,
                          seed=5)
  ref_long, ref_global = numpy_reference(model_weights(model), model.config,
                                         feats)
  for impl in ("full", "sparse"):
    long_out, global_out = model(feats, att_implementation=impl)
    assert max_abs_diff(long_out, ref_long) < 1e-5
    assert max_abs_diff(global_out, ref_global) < 1e-5


@pytest.mark.parametrize("impl", ["full", "sparse"])
def test_fully_masked_rows_are_finite_and_attend_to_nothing(impl):
  model = tiny_model(num_hidden_layers=1)
  feats = random_features(model.config, batch=2, long_len=10, global_len=4,
                          seed=3)
  for key in ("l2l_att_mask", "l2g_att_mask", "g2g_att_mask", "g2l_att_mask"):
    feats[key] = np.zeros_like(feats[key])
  long_out, global_out, probs = model(feats, att_implementation=impl,
                                      return_attention_probs=True)
  assert np.isfinite(long_out.numpy()).all()
  assert np.isfinite(global_out.numpy()).all()
  for p in probs[0].values():
    assert np.all(p.numpy() == 0.0)


def test_missing_side_inputs_mean_no_masking_and_no_relative_term():
  model = tiny_model(num_hidden_layers=1)
  feats = random_features(model.config, batch=1, long_len=9, global_len=3,
                          fully_masked_rows=False, with_relative_ids=False)
  plain = {k: feats[k] for k in ("token_ids", "global_token_ids")}
  ones = dict(plain)
  for key in ("l2l_att_mask", "l2g_att_mask", "g2g_att_mask", "g2l_att_mask"):
    ones[key] = np.ones_like(feats[key])
  for impl in ("full", "sparse"):
    a = model(plain, att_implementation=impl)
    b = model(ones, att_implementation=impl)
    assert max_abs_diff(a[0], b[0]) == 0.0


def test_dynamic_long_length_runs_sparse():
  model = tiny_model()
  feats = random_features(model.config, batch=1, long_len=10, global_len=3,
                          seed=1)
  specs = {k: tf.TensorSpec([None, None] + list(v.shape[2:]), tf.int32)
           for k, v in feats.items()}
  fn = tf.function(lambda f: model(f), input_signature=[specs])
  dyn = fn(feats)
  static = model(feats, att_implementation="sparse")
  assert max_abs_diff(dyn[0], static[0]) < 1e-5


# ---------------------------------------------------------- probabilities
def test_probs_shapes_sums_and_paths_agree():
  model = tiny_model(num_hidden_layers=2, residual_attention=True)
  config = model.config
  feats = random_features(config, batch=2, long_len=11, global_len=4, seed=2)
  outs = {}
  for impl in ("full", "sparse"):
    long_out, _, probs = model(feats, att_implementation=impl,
                               return_attention_probs=True)
    assert len(probs) == 2
    p = probs[1]
    heads, window = config.num_attention_heads, 2 * config.local_radius + 1
    assert p["l2l"].shape == (2, heads, 11, window)
    assert p["l2g"].shape == (2, heads, 11, 4)
    assert p["g2g"].shape == (2, heads, 4, 4)
    assert p["g2l"].shape == (2, heads, 4, 11)
    long_sum = p["l2l"].numpy().sum(-1) + p["l2g"].numpy().sum(-1)
    valid = (feats["l2l_att_mask"].max(-1) | feats["l2g_att_mask"].max(-1)) > 0
    np.testing.assert_allclose(long_sum[:, 0][valid], 1.0, atol=1e-5)
    assert np.all(long_sum[:, 0][~valid] == 0.0)
    # Masked keys get (numerically) nothing.
    masked = feats["l2l_att_mask"][:, np.newaxis] == 0
    assert np.abs(p["l2l"].numpy()[np.broadcast_to(masked, p["l2l"].shape)]
                  ).max() < 1e-6
    outs[impl] = (long_out, probs)
  assert max_abs_diff(outs["full"][0], outs["sparse"][0]) < 1e-5
  for layer in range(2):
    for key in ("l2l", "l2g", "g2g", "g2l"):
      assert max_abs_diff(outs["full"][1][layer][key],
                          outs["sparse"][1][layer][key]) < 1e-5


def test_default_call_returns_two_outputs():
  config = tiny_config()
  outputs = EtcModel(config)(random_features(config, batch=1, long_len=6,
                                             global_len=2))
  assert len(outputs) == 2


@pytest.mark.parametrize("impl", ["sparse", "full"])
def test_dropout_gain_folded_into_softmax_matches_explicit_scaling(impl):
  # Without probabilities the dropout gain rides on the softmax's row scale;
  # with them it is applied after the softmax. Same seed: same function.
  model = tiny_model(num_hidden_layers=2, residual_attention=True,
                     attention_probs_dropout_prob=0.3, hidden_dropout_prob=0.0)
  feats = random_features(model.config, batch=2, long_len=13, global_len=4,
                          seed=6)

  def run(**kwargs):
    tf.random.set_seed(99)  # fixes the per-call dropout seed
    return model(feats, training=True, att_implementation=impl, **kwargs)

  folded = run()
  explicit = run(return_attention_probs=True)
  for a, b in zip(folded, explicit[:2]):
    assert max_abs_diff(a, b) < 1e-5
  # And dropout is on (the comparison above is not between two no-ops).
  undropped = model(feats, training=False, att_implementation=impl)
  assert max_abs_diff(folded[0], undropped[0]) > 1e-3


# ------------------------------------------------------ residual attention
@pytest.fixture(scope="module")
def base():
  model = tiny_model(num_hidden_layers=3)
  randomize_relative_bias(model)
  feats = random_features(model.config, batch=2, long_len=12, global_len=4,
                          seed=11)
  return model.config, model, feats


def _with(config, source, **changes):
  return copy_weights(source, tiny_model(config.replace(**changes)))


def test_residual_first_layer_unchanged(base):
  config, model, feats = base
  off = _with(config, model, num_hidden_layers=1)
  on = _with(config, model, num_hidden_layers=1, residual_attention=True)
  assert max_abs_diff(off(feats)[0], on(feats)[0]) == 0.0


def test_residual_later_layers_change(base):
  config, model, feats = base
  on = _with(config, model, residual_attention=True)
  assert max_abs_diff(model(feats)[0], on(feats)[0]) > 1e-3


def test_residual_off_equals_no_patterns(base):
  config, model, feats = base
  none = _with(config, model, residual_attention=True, residual_patterns=())
  assert max_abs_diff(model(feats)[0], none(feats)[0]) == 0.0


@pytest.mark.parametrize("pattern", ["l2l", "l2g", "g2g", "g2l"])
def test_each_stream_switches_alone(base, pattern):
  config, model, feats = base
  only = _with(config, model, residual_attention=True,
               residual_patterns=(pattern,))
  all_but = _with(config, model, residual_attention=True,
                  residual_patterns=tuple(
                      p for p in ("l2l", "l2g", "g2g", "g2l") if p != pattern))
  everything = _with(config, model, residual_attention=True)
  out_off, out_only = model(feats), only(feats)
  out_all_but, out_all = all_but(feats), everything(feats)
  # The pattern's own branch shows the change first (g2g moves the
  # global output), so look at both outputs.
  assert max(max_abs_diff(a, b) for a, b in zip(out_off, out_only)) > 1e-4
  assert max(max_abs_diff(a, b) for a, b in zip(out_all_but, out_all)) > 1e-4
  ref = numpy_reference(model_weights(only), only.config, feats)
  assert max_abs_diff(out_only[0], ref[0]) < 1e-5
  assert max_abs_diff(out_only[1], ref[1]) < 1e-5


@pytest.mark.parametrize("running_mean", [False, True])
@pytest.mark.parametrize("impl", ["full", "sparse"])
def test_residual_matches_independent_numpy_reference(running_mean, impl):
  model = tiny_model(num_hidden_layers=2, residual_attention=True,
                     residual_running_mean=running_mean)
  randomize_relative_bias(model)
  feats = random_features(model.config, batch=2, long_len=13, global_len=5,
                          seed=7)
  ref_long, ref_global, ref_probs = numpy_reference(
      model_weights(model), model.config, feats, return_probs=True)
  long_out, global_out, probs = model(feats, att_implementation=impl,
                                      return_attention_probs=True)
  assert max_abs_diff(long_out, ref_long) < 1e-5
  assert max_abs_diff(global_out, ref_global) < 1e-5
  # l2l probabilities come back in the window layout; compare the others.
  for layer in range(2):
    for p in ("l2g", "g2g", "g2l"):
      assert max_abs_diff(probs[layer][p], ref_probs[layer][p]) < 1e-5


def test_running_mean_differs_from_sum():
  model = tiny_model(num_hidden_layers=2, residual_attention=True)
  randomize_relative_bias(model, scale=1.0)  # scores large enough to matter
  feats = random_features(model.config, batch=1, long_len=8, global_len=3,
                          seed=2)
  mean = _with(model.config, model, residual_running_mean=True)
  assert max_abs_diff(model(feats)[0], mean(feats)[0]) > 1e-4


@pytest.mark.parametrize("impl", ["full", "sparse"])
def test_gradients_flow_through_streams(impl):
  # Layer 0's relative bias enters layer 1's logits only through the stream
  # (besides the hidden states). Compare autodiff with central differences.
  model = tiny_model(num_hidden_layers=2, residual_attention=True)
  randomize_relative_bias(model, scale=0.3)
  feats = random_features(model.config, batch=1, long_len=9, global_len=3,
                          seed=4, fully_masked_rows=False)
  bias = model.official_variables()[
      "etc_document_bert/global_local_transformer_layers/fused_att_layer_0/"
      "fused_global_local_att/global_qkv_attention/relative_bias_table"]
  probe = tf.constant(np.random.RandomState(0).normal(
      size=[1, 9, model.config.hidden_size]).astype(np.float32))

  def loss():
    long_out, global_out = model(feats, att_implementation=impl)
    return tf.reduce_sum(long_out * probe) + tf.reduce_sum(global_out)

  with tf.GradientTape() as tape:
    value = loss()
  grad = tape.gradient(value, bias).numpy()
  assert np.abs(grad).max() > 0
  original = bias.numpy()
  eps = 1e-2
  for index in [(0, 0), (3, 1), (int(np.argmax(np.abs(grad[:, 0]))), 0)]:
    plus, minus = original.copy(), original.copy()
    plus[index] += eps
    minus[index] -= eps
    bias.assign(plus)
    f_plus = float(loss())
    bias.assign(minus)
    f_minus = float(loss())
    bias.assign(original)
    numeric = (f_plus - f_minus) / (2 * eps)
    assert abs(numeric - grad[index]) <= 2e-2 * max(1.0, abs(numeric))


# ------------------------------------------------- gradient checkpointing
@pytest.mark.parametrize("period", [1, 2])
@pytest.mark.parametrize("impl", ["full", "sparse"])
def test_checkpointing_same_loss_and_gradients_with_dropout(period, impl):
  config = tiny_config(num_hidden_layers=3, hidden_dropout_prob=0.2,
                       attention_probs_dropout_prob=0.2,
                       residual_attention=True)
  plain, ckpt = twin_models(config, grad_checkpointing_period=period)
  feats = random_features(config, batch=2, long_len=11, global_len=4, seed=9)
  probe = probes(config, 2, 11, 4)
  ref = loss_and_grads(plain, feats, probe, training=True, impl=impl)
  assert_same_training(ref, loss_and_grads(ckpt, feats, probe, training=True,
                                           impl=impl))
  # Dropout really was on: an inference pass gives another loss.
  assert abs(loss_and_grads(plain, feats, probe, training=False,
                            impl=impl)[1] - ref[1]) > 1e-3


def test_dropout_is_deterministic_per_seed():
  model = tiny_model(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
  feats = random_features(model.config, batch=1, long_len=8, global_len=3)
  tf.random.set_seed(5)
  a = model(feats, training=True)[0].numpy()
  tf.random.set_seed(5)
  b = model(feats, training=True)[0].numpy()
  c = model(feats, training=True)[0].numpy()
  assert np.array_equal(a, b)
  assert not np.array_equal(b, c)


# --------------------------------------------------- precision and XLA
@pytest.fixture(scope="module")
def float32_model():
  model = tiny_model(num_hidden_layers=2, residual_attention=True)
  randomize_relative_bias(model)
  return model.config, model


@pytest.mark.parametrize("policy,tolerance", [("mixed_bfloat16", 0.15),
                                              ("mixed_float16", 0.02)])
@pytest.mark.parametrize("impl", ["full", "sparse"])
def test_mixed_precision_finite_and_close(float32_model, policy, tolerance,
                                          impl):
  config, reference = float32_model
  # Fully masked rows included (random_features makes some).
  feats = random_features(config, batch=2, long_len=13, global_len=5, seed=8)
  expected = reference(feats, att_implementation=impl)
  tf_keras.mixed_precision.set_global_policy(policy)
  try:
    model = tiny_model(config)
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")
  copy_weights(reference, model)
  long_out, global_out, probs = model(feats, att_implementation=impl,
                                      return_attention_probs=True)
  assert long_out.dtype == tf.as_dtype(policy.split("_")[1])
  for out, exp in zip((long_out, global_out), expected):
    out = tf.cast(out, tf.float32).numpy()
    assert np.isfinite(out).all()
    assert max_abs_diff(out, exp) < tolerance
  for layer in probs:
    for p in layer.values():
      assert np.isfinite(p.numpy()).all()


@pytest.mark.parametrize("option", ["softmax_dtype", "stream_dtype"])
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_compute_dtype_options_close_forward_and_gradients(float32_model,
                                                           policy, option):
  # softmax_dtype='compute' keeps the probabilities in the compute dtype:
  # the context product read them in that dtype already, so the forward
  # pass is unchanged; the gradients round once more. stream_dtype='compute'
  # rounds the residual sums carried between layers: the second layer's
  # logits round once more (the tiny model's logits are small, so the
  # outputs may round alike; the gradients differ). Dropout and fully masked
  # rows included.
  config, reference = float32_model
  feats = {k: tf.constant(v) for k, v in random_features(
      config, batch=2, long_len=13, global_len=5, seed=8).items()}
  config = config.replace(attention_probs_dropout_prob=0.1)
  tf_keras.mixed_precision.set_global_policy(policy)
  try:
    models = [copy_weights(reference, tiny_model(config, **{option: d}))
              for d in ("float32", "compute")]
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")

  def step(model):
    tf.random.set_seed(3)
    with tf.GradientTape() as tape:
      long_out, global_out = model(feats, training=True,
                                   att_implementation="sparse")
      loss = (tf.reduce_sum(tf.cast(long_out, tf.float32) ** 2) +
              tf.reduce_sum(tf.cast(global_out, tf.float32) ** 2))
    grads = tape.gradient(loss, model.trainable_variables)
    return [long_out, global_out], grads

  (outs_a, grads_a), (outs_b, grads_b) = step(models[0]), step(models[1])
  for a, b in zip(outs_a, outs_b):
    a, b = tf.cast(a, tf.float32).numpy(), tf.cast(b, tf.float32).numpy()
    assert np.isfinite(b).all()
    assert max_abs_diff(a, b) < 1e-2 * np.max(np.abs(a))
  grads_a = [tf.convert_to_tensor(g).numpy() for g in grads_a]
  grads_b = [tf.convert_to_tensor(g).numpy() for g in grads_b]
  # Each gradient within 5% of its own scale; gradients that are rounding
  # noise alone (~1e-7: biases feeding a layer norm) are judged against the
  # largest gradient's rounding instead.
  noise = 1e-5 * max(np.max(np.abs(g)) for g in grads_a)
  for a, b in zip(grads_a, grads_b):
    assert np.isfinite(b).all()
    assert max_abs_diff(a, b) <= 0.05 * max(np.max(np.abs(a)), noise)
  if option == "stream_dtype":  # the option acts
    assert max(max_abs_diff(a, b) for a, b in zip(grads_a, grads_b)) > 0


@pytest.mark.parametrize("impl", ["full", "sparse"])
def test_xla_matches_eager(float32_model, impl):
  config, model = float32_model
  feats = random_features(config, batch=2, long_len=16, global_len=4, seed=6)
  compiled = tf.function(
      lambda f: model(f, att_implementation=impl), jit_compile=True)
  xla = compiled({k: tf.constant(v) for k, v in feats.items()})
  eager = model(feats, att_implementation=impl)
  for a, b in zip(xla, eager):
    assert max_abs_diff(a, b) < 1e-5


@pytest.mark.parametrize("changes,dropout", [
    (dict(attention_chunk_len=3), 0.0),
    (dict(attention_chunk_len=3, recompute_residual_streams=True), 0.0),
    # Hash dropout draws the same bits in XLA and in the graph.
    (dict(attention_chunk_len=4, grad_checkpointing_period=1,
          dropout_rng="hash"), 0.1)])
def test_xla_chunked_training_step_matches_graph(changes, dropout,
                                                 monkeypatch):
  # Configurations that chunk the attention core, as inputs longer than
  # 4096 tokens do by default. Under XLA the core is computed whole (or, with
  # recomputed streams, as one chunk); the plain graph chunks it. Both must
  # give the same loss and gradients, with dropout and checkpointing too.
  # Two traced functions would draw different per-call seeds: fixed here.
  monkeypatch.setattr(dropout_lib, "new_call_seed",
                      lambda: tf.constant([7, 11], tf.int32))
  model = tiny_model(tiny_config(num_hidden_layers=2, local_radius=2,
                                 residual_attention=True,
                                 hidden_dropout_prob=dropout,
                                 attention_probs_dropout_prob=dropout),
                     **changes)
  randomize_relative_bias(model)
  feats = {k: tf.constant(v) for k, v in random_features(
      model.config, batch=2, long_len=10, global_len=4, seed=3).items()}

  def step(f):
    with tf.GradientTape() as tape:
      long_out, global_out = model(f, training=True,
                                   att_implementation="sparse")
      loss = (tf.reduce_sum(tf.square(long_out)) +
              tf.reduce_sum(tf.square(global_out)))
    return loss, tape.gradient(loss, model.trainable_variables)

  loss_xla, grads_xla = tf.function(step, jit_compile=True)(feats)
  loss_ref, grads_ref = tf.function(step)(feats)
  np.testing.assert_allclose(loss_xla.numpy(), loss_ref.numpy(), rtol=1e-5)
  grads_xla = [tf.convert_to_tensor(g).numpy() for g in grads_xla]
  grads_ref = [tf.convert_to_tensor(g).numpy() for g in grads_ref]
  # XLA fuses and sums in its own order: float32 noise scales with the
  # largest gradient (~150 here), and some gradients are that noise alone
  # (~1e-5: biases feeding a layer norm), hence one absolute allowance.
  scale = max(np.abs(g).max() for g in grads_ref)
  for gx, gr in zip(grads_xla, grads_ref):
    assert np.isfinite(gx).all()
    np.testing.assert_allclose(gx, gr, rtol=1e-4, atol=1e-5 + 2e-6 * scale)


# ------------------------------------------------------------ bad inputs
@pytest.fixture(scope="module")
def model():
  return tiny_model()


@pytest.fixture
def feats():
  return random_features(tiny_config(), batch=2, long_len=8, global_len=3)


def test_missing_required_key(model, feats):
  del feats["global_token_ids"]
  with pytest.raises(ValueError, match="global_token_ids"):
    model(feats)


def test_wrong_rank(model, feats):
  feats["token_ids"] = feats["token_ids"][0]
  with pytest.raises(ValueError, match="token_ids: expected rank 2"):
    model(feats)


@pytest.mark.parametrize("key,shape", [
    ("l2l_att_mask", [2, 8, 7]),           # window of the wrong radius
    ("l2g_att_mask", [2, 8, 4]),           # global length mismatch
    ("g2l_relative_att_ids", [2, 3, 9]),   # long length mismatch
    ("segment_ids", [1, 8]),               # batch mismatch
])
def test_mismatched_shapes(model, feats, key, shape):
  feats[key] = np.zeros(shape, np.int32)
  with pytest.raises(ValueError, match=key):
    model(feats)


@pytest.mark.parametrize("key,value", [("token_ids", 50), ("segment_ids", 16),
                                       ("l2l_relative_att_ids", 8),
                                       ("global_token_ids", -1)])
def test_ids_out_of_range(model, feats, key, value):
  feats[key] = feats[key].copy()
  feats[key][0, 0] = value
  with pytest.raises(ValueError, match=key):
    model(feats)


def test_mask_must_be_binary(model, feats):
  feats["g2g_att_mask"] = feats["g2g_att_mask"] * 2
  with pytest.raises(ValueError, match="g2g_att_mask"):
    model(feats)


def test_unknown_implementation(model, feats):
  with pytest.raises(ValueError, match="att_implementation"):
    model(feats, att_implementation="dense")


# ---------------------------------------------- from-scratch initialisation
def test_init_defaults_are_the_originals():
  model = tiny_model()
  for block in model.blocks:
    att = block.attention
    assert np.all(att.global_relative.bias_table.numpy() == 0.0)
    assert np.all(att.long_relative.bias_table.numpy() == 0.0)
    v = att.l2l_value_projection.kernel.numpy()
    assert not np.allclose(v.T @ v, np.eye(v.shape[1]), atol=1e-2)


def test_own_sentence_bias_sets_one_row_of_the_global_table():
  model = tiny_model(own_sentence_bias_init=7.5)
  own = own_sentence_id(model.config.relative_pos_max_distance)
  for block in model.blocks:
    table = block.attention.global_relative.bias_table.numpy()
    assert np.all(table[own] == 7.5)
    assert np.all(np.delete(table, own, axis=0) == 0.0)
    # The long queries' table is untouched: a high own-sentence bias there
    # would stop long tokens from reading the query's and candidates'
    # global tokens.
    assert np.all(block.attention.long_relative.bias_table.numpy() == 0.0)


def test_count_head_biases():
  model = tiny_model(num_attention_heads=4, own_sentence_bias_init=4.0,
                     count_head_bias_init=3.0, use_hard_g2l_mask=True)
  max_distance = model.config.relative_pos_max_distance
  own = own_sentence_id(max_distance)
  first, last = [block.attention.global_relative.bias_table.numpy()
                 for block in model.blocks]
  # The last layer's last head counts; the first layer only has the
  # own-sentence bias.
  np.testing.assert_array_equal(last[own], [4.0, 4.0, 4.0, 0.0])
  np.testing.assert_array_equal(last[0], [0.0, 0.0, 0.0, 3.0])
  for rel_id in range(1, 2 * max_distance + 1):
    np.testing.assert_array_equal(last[rel_id], [0.0, 0.0, 0.0, -3.0])
  assert np.all(last[own + 1:] == 0.0)
  assert np.all(first[own] == 4.0)
  assert np.all(np.delete(first, own, axis=0) == 0.0)


def test_count_head_weight_on_itself_tells_the_sentence_length():
  # Three sentences of 3, 5 and 4 identical pieces (a fully masked sentence
  # looks like this): averaging heads see the same keys whatever the length;
  # the counter's weight on its own token is about 1 / (1 + n e^-b), b the
  # bias after the scores' 1/sqrt(d) scaling.
  b = 3.0
  config = tiny_config(num_attention_heads=4, num_hidden_layers=1,
                       own_sentence_bias_init=16.0,
                       count_head_bias_init=2 * b, use_hard_g2l_mask=True,
                       value_output_identity_init=1.0)
  lengths = [3, 5, 4]
  sentence_ids = np.repeat(np.arange(3), lengths)[None]
  long_breakpoints = np.zeros_like(sentence_ids)
  long_breakpoints[0, -1] = 1
  side = make_global_local_side_inputs(
      long_breakpoints, np.array([[0, 0, 1]]), sentence_ids,
      local_radius=config.local_radius,
      relative_pos_max_distance=config.relative_pos_max_distance,
      use_hard_g2l_mask=True)
  feats = dict(token_ids=np.full_like(sentence_ids, 7),
               global_token_ids=np.ones([1, 3], np.int32), **side)
  _, _, probs = EtcModel(config)(feats, return_attention_probs=True)
  g2g = probs[0]["g2g"].numpy()[0]  # [H, G, G]
  self_weight = np.diagonal(g2g, axis1=1, axis2=2)  # [H, G]
  assert config.size_per_head == 4
  expected = 1 / (1 + np.array(lengths) * np.exp(-b) + 2 * np.exp(-2 * b))
  # Query-key products of an untrained model move it by a few percent.
  np.testing.assert_allclose(self_weight[-1], expected, rtol=0.05)
  assert np.all(np.diff(self_weight[-1][[0, 2, 1]]) < 0)
  # The other heads look at their sentence's pieces.
  assert np.all(self_weight[:-1] < 0.02)


@pytest.mark.parametrize("share_qkv", [True, False])
def test_value_output_identity(share_qkv):
  model = tiny_model(value_output_identity_init=0.5,
                     share_qkv_projections=share_qkv)
  qs = []
  for block in model.blocks:
    att = block.attention
    values = [att.l2l_value_projection, att.l2g_value_projection,
              att.g2g_value_projection, att.g2l_value_projection]
    q = values[0].kernel.numpy()
    np.testing.assert_allclose(q.T @ q, np.eye(q.shape[0]), atol=1e-5)
    for v in values[1:]:
      np.testing.assert_array_equal(v.kernel.numpy(), q)
    for out in (att.long_output_projection, att.global_output_projection):
      np.testing.assert_allclose(q @ out.kernel.numpy(),
                                 0.5 * np.eye(q.shape[0]), atol=1e-5)
      assert np.all(out.bias.numpy() == 0.0)
    qs.append(q)
  # Each layer draws its own matrix.
  assert not np.allclose(qs[0], qs[1])


@pytest.mark.parametrize("share_qkv", [True, False])
def test_query_key_identity(share_qkv):
  model = tiny_model(query_key_identity_init=4.0,
                     share_qkv_projections=share_qkv)
  for block in model.blocks:
    att = block.attention
    q = att.long_query_projection.kernel.numpy()
    # Query and key kernels are both 2 Q: scores start as 4 x.x'.
    np.testing.assert_allclose(q.T @ q, 4.0 * np.eye(q.shape[0]), atol=1e-4)
    for key in (att.l2l_key_projection, att.l2g_key_projection,
                att.g2g_key_projection, att.g2l_key_projection,
                att.global_query_projection):
      np.testing.assert_array_equal(key.kernel.numpy(), q)
    # Values keep the ordinary initializer.
    v = att.l2l_value_projection.kernel.numpy()
    assert not np.allclose(v.T @ v, np.eye(v.shape[1]), atol=1e-2)


def test_shared_matrix_also_when_built_inside_a_tf_function():
  config = tiny_config(value_output_identity_init=0.5,
                       query_key_identity_init=4.0)
  model = EtcModel(config)
  feats = random_features(config, batch=1, long_len=8, global_len=3, seed=1)
  tf.function(model.call)(feats)  # Variables are created while tracing.
  att = model.blocks[0].attention
  q = att.l2l_value_projection.kernel.numpy()
  np.testing.assert_allclose(q @ att.long_output_projection.kernel.numpy(),
                             0.5 * np.eye(q.shape[0]), atol=1e-5)
  k = att.l2l_key_projection.kernel.numpy()
  np.testing.assert_allclose(k.T @ k, 4.0 * np.eye(k.shape[0]), atol=1e-4)


def test_initialised_model_runs_finite():
  config = tiny_config(own_sentence_bias_init=20.0,
                       value_output_identity_init=1.0,
                       query_key_identity_init=0.5)
  feats = random_features(config, batch=2, long_len=12, global_len=4, seed=1)
  for out in EtcModel(config, ExecutionConfig())(feats):
    assert np.isfinite(out.numpy()).all()


def _three_sentences(lengths, long_len, config, hard_g2l):
  """One example: sentences of `lengths` identical pieces, then padding."""
  sentence_ids = np.zeros([1, long_len], np.int32)
  sentence_ids[0, :sum(lengths)] = np.repeat(np.arange(len(lengths)), lengths)
  long_breakpoints = np.zeros_like(sentence_ids)
  long_breakpoints[0, sum(lengths) - 1] = 1
  global_breakpoints = np.zeros([1, len(lengths) + 1], np.int32)
  global_breakpoints[0, len(lengths) - 1] = 1
  side = make_global_local_side_inputs(
      long_breakpoints, global_breakpoints, sentence_ids,
      local_radius=config.local_radius,
      relative_pos_max_distance=config.relative_pos_max_distance,
      use_hard_g2l_mask=hard_g2l)
  return dict(token_ids=np.full_like(sentence_ids, 7),
              global_token_ids=np.ones_like(global_breakpoints), **side)


@pytest.mark.parametrize("hard_g2l", [False, True])
def test_sentence_lengths_are_counted_from_the_side_inputs(hard_g2l):
  config = tiny_config(max_sentence_length_embeddings=5,
                       use_hard_g2l_mask=hard_g2l)
  model = EtcModel(config)
  feats = _three_sentences([3, 6, 1], 16, config, hard_g2l)
  lengths = model._sentence_lengths(model._check_inputs(feats))
  # Padding (6 long tokens, 1 global token) belongs to no sentence.
  np.testing.assert_array_equal(lengths.numpy(), [[3, 6, 1, 0]])


def test_sentence_length_embedding_tells_lengths_apart():
  # Sentences of 3 and 4 identical pieces: averaging attention gives their
  # summary tokens the same output; a trained length table does not.
  # Lengths at or beyond the table's end share its last row.
  config = tiny_config(max_sentence_length_embeddings=5, num_hidden_layers=1,
                       use_hard_g2l_mask=True, own_sentence_bias_init=16.0)
  model = EtcModel(config)
  model.build()
  feats = _three_sentences([3, 4, 5, 6], 24, config, True)
  table = model.embeddings.sentence_length_embedding.embedding_table
  assert table.shape == (5, config.hidden_size)
  assert ("etc_document_bert/sentence_length_emb_lookup/embedding_table"
          in model.official_variables())
  g = model(feats)[1].numpy()[0]
  assert max_abs_diff(g[0], g[1]) > 0.1
  # Outputs of scale 1; softmaxes over 5 and 6 keys round differently.
  np.testing.assert_allclose(g[2], g[3], atol=1e-4)
  # A table of zeros is no table: the summary tokens of 3 and 4 identical
  # pieces are then the same (the premise of the test).
  table.assign(tf.zeros_like(table))
  g = model(feats)[1].numpy()[0]
  np.testing.assert_allclose(g[0], g[1], atol=1e-4)


def test_sentence_length_embedding_needs_the_g2l_side_inputs():
  config = tiny_config(max_sentence_length_embeddings=5)
  feats = _three_sentences([2, 2], 8, config, False)
  del feats["g2l_relative_att_ids"]
  with pytest.raises(ValueError, match="g2l_relative_att_ids"):
    EtcModel(config)(feats)
