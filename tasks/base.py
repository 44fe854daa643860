"""The Task interface: everything task-specific that the shared runner needs.

A task (WikiHop, HotpotQA, NQ, OpenKP) subclasses `Task` and provides:

* data: `feature_spec()` (the raw per-example features stored in TFRecords),
  and `side_inputs(features)` (the ETC attention masks / relative ids built
  from them). The base class turns the spec into the input pipeline
  (`build_inputs`: TFRecords -> parsed, batched, sharded per worker).
* model: `build_head_model(encoder)` -> an `EtcTaskModel` (encoder + head).
  The side inputs are built inside the model from the raw features, so every
  exported signature takes raw features only.
* training: `per_example_loss(features, outputs)` (float32 `[B]`),
  `build_metrics()` / `update_metrics(...)`.
* predictions: `prediction_outputs(features, outputs)` (per-example tensors
  gathered over the predict set) and `write_predictions(...)` (the official
  submission format).
* export: `serving_outputs(features, outputs)` and `serving_signatures(model)`;
  the base gives `serving_default` (feature tensors) and `serve_examples`
  (serialized tf.Examples); tasks add raw-input signatures, which run the
  preprocessing featurizer in the graph (`RawInputTask`).

The runner (`tasks/run.py` -> `etc_realformer.training.experiment`) only uses
these methods, so a new task needs no change to it: subclass, make it
`@gin.configurable`, add `gin/tasks/<name>.gin`.
"""

import abc
from typing import Any, Dict, List, Mapping, Optional, Tuple

import gin
import tensorflow as tf
import tf_keras

from etc_realformer.config import EtcConfig
from etc_realformer.features.side_inputs import SIDE_INPUT_KEYS
from etc_realformer.features.side_inputs import make_multihop_side_inputs
from tasks.common import tfrecords


Features = Dict[str, tf.Tensor]
# name -> (dtype, unbatched shape); `(None,)` = variable length.
FeatureSpec = Mapping[str, Tuple[tf.DType, Tuple[Optional[int], ...]]]

MODES = ("train", "eval", "predict")


def multihop_side_inputs(config: EtcConfig, features: Features
                         ) -> Dict[str, Optional[tf.Tensor]]:
  """Paragraph-aware side inputs for the multi-hop tasks (WikiHop, HotpotQA).

  Reads the raw features both featurizers emit (`long_paragraph_breakpoints`,
  `long_paragraph_ids`, `long_sentence_ids`, `global_paragraph_breakpoints`,
  `ignore_hard_g2l_mask`, and `l2g_linked_ids` when present) and the masking
  options of `config`.
  """
  return make_multihop_side_inputs(
      long_paragraph_breakpoints=features["long_paragraph_breakpoints"],
      long_paragraph_ids=features["long_paragraph_ids"],
      long_sentence_ids=features["long_sentence_ids"],
      global_paragraph_breakpoints=features["global_paragraph_breakpoints"],
      local_radius=config.local_radius,
      relative_pos_max_distance=config.relative_pos_max_distance,
      use_hard_g2l_mask=config.use_hard_g2l_mask,
      ignore_hard_g2l_mask=features["ignore_hard_g2l_mask"],
      use_hard_l2g_mask=config.use_hard_l2g_mask,
      l2g_linked_ids=features.get("l2g_linked_ids"))


@gin.configurable
def etc_config(config_file: Optional[str] = None, **overrides: Any
               ) -> EtcConfig:
  """The encoder configuration, from gin (`etc_config.hidden_size = 768`).

  Args:
    config_file: optional `etc_config.json` (e.g. shipped with a released
      checkpoint); its values are the base, `overrides` win.
    **overrides: any `EtcConfig` field.
  """
  if config_file:
    return EtcConfig.from_json_file(config_file).replace(**overrides)
  return EtcConfig(**overrides)


class EtcTaskModel(tf_keras.Model):
  """Encoder + task head. `call(features)` -> dict of named outputs.

  The side inputs are built in the graph from the raw features by the task's
  `side_inputs` function unless the features already carry them (when a task
  prefers to build them in the tf.data pipeline).
  """

  def __init__(self, encoder: tf_keras.layers.Layer, side_inputs_fn,
               **kwargs):
    super().__init__(**kwargs)
    # Attribute name `encoder` is part of the checkpoint layout
    # (`model/encoder/...`), which `training.checkpointing` relies on.
    self.encoder = encoder
    self._side_inputs_fn = side_inputs_fn

  def encode(self, features: Features, training: Optional[bool] = None
             ) -> Tuple[tf.Tensor, tf.Tensor]:
    """Returns long [B, L, H] and global [B, G, H] encoder outputs."""
    inputs = dict(features)
    if not all(k in inputs for k in SIDE_INPUT_KEYS):
      side = self._side_inputs_fn(features)
      inputs.update({k: v for k, v in side.items() if v is not None})
    return self.encoder(inputs, training=training)

  def call(self, features: Features, training: Optional[bool] = None
           ) -> Dict[str, tf.Tensor]:
    long_output, global_output = self.encode(features, training=training)
    return self.head(features, long_output, global_output, training=training)

  def head(self, features: Features, long_output: tf.Tensor,
           global_output: tf.Tensor, training: Optional[bool] = None
           ) -> Dict[str, tf.Tensor]:
    """Task outputs from the encoder outputs; logits in float32."""
    raise NotImplementedError


class Task(abc.ABC):
  """Base class of the fine-tuning tasks (see the module docstring)."""

  name: str = "task"

  def __init__(self,
               model_config: Optional[EtcConfig] = None,
               long_seq_len: int = 4096,
               global_seq_len: int = 512,
               train_input: Optional[str] = None,
               eval_input: Optional[str] = None,
               predict_input: Optional[str] = None,
               shuffle_buffer_size: int = 1000,
               side_inputs_in_pipeline: bool = False,
               seed: Optional[int] = None):
    """Common task settings.

    Args:
      model_config: the encoder config; None = `etc_config()` from gin.
      long_seq_len: L, the long input length of the TFRecords.
      global_seq_len: G, the global input length.
      train_input, eval_input, predict_input: TFRecord file patterns
        (comma-separated patterns allowed).
      shuffle_buffer_size: training shuffle buffer (examples).
      side_inputs_in_pipeline: build side inputs in tf.data (host CPU) instead
        of the model graph (useful on TPU).
      seed: shuffle seed (None = nondeterministic).
    """
    self.model_config = model_config or etc_config()
    self.long_seq_len = long_seq_len
    self.global_seq_len = global_seq_len
    self.input_patterns = {"train": train_input, "eval": eval_input,
                           "predict": predict_input}
    self.shuffle_buffer_size = shuffle_buffer_size
    self.side_inputs_in_pipeline = side_inputs_in_pipeline
    self.seed = seed

  # ------------------------------------------------------------------ data
  @abc.abstractmethod
  def feature_spec(self) -> FeatureSpec:
    """Per-example raw features in the TFRecords: name -> (dtype, shape).

    The format of `tasks.common.tfrecords` (shape `(None,)` = variable
    length); unbatched shapes, e.g. `[L]`, `[G]`, `[]`.
    """

  @abc.abstractmethod
  def side_inputs(self, features: Features) -> Dict[str, Optional[tf.Tensor]]:
    """The eight side inputs from batched raw features ([B, L] / [B, G])."""

  def model_features(self) -> Tuple[str, ...]:
    """Names of the features the model reads (default: the fixed-shape
    numeric ones). These are the inputs of the `serving_default` signature."""
    return tuple(name for name, (dtype, shape) in self.feature_spec().items()
                 if dtype != tf.string and None not in shape)

  def model_input_spec(self) -> Dict[str, tf.TensorSpec]:
    """Batched specs of `model_features()` (serving_default's inputs)."""
    spec = self.feature_spec()
    return {k: tf.TensorSpec([None, *spec[k][1]], spec[k][0], name=k)
            for k in self.model_features()}

  def parse_examples(self, serialized: tf.Tensor) -> Features:
    """Parses a batch of serialized tf.Examples [B] with `feature_spec()`.

    Integers are stored as int64 (the tf.Example type) and cast back to the
    spec's dtype; variable-length `(None,)` features come back dense
    ([B, longest in the batch], padded with 0 or b"").
    """
    spec = self.feature_spec()
    parsed = tf.io.parse_example(serialized, tfrecords.parsing_spec(spec))
    out = {}
    for name, (dtype, _) in spec.items():
      value = parsed[name]
      if isinstance(value, tf.SparseTensor):
        value = tf.sparse.to_dense(
            value, default_value=b"" if dtype == tf.string else None)
      out[name] = tf.cast(value, dtype) if value.dtype != dtype else value
    return out

  def input_files(self, mode: str) -> List[str]:
    pattern = self.input_patterns.get(mode)
    if not pattern:
      raise ValueError(f"{self.name}: no input files for mode {mode!r}; set "
                       f"{type(self).__name__}.{mode}_input in gin")
    files = []
    for p in pattern.split(","):
      matched = sorted(tf.io.gfile.glob(p.strip()))
      if not matched:
        raise FileNotFoundError(f"{self.name} {mode} input: no file matches "
                                f"{p.strip()!r}")
      files.extend(matched)
    return files

  def build_inputs(self, mode: str, global_batch_size: int,
                   input_context: Optional[tf.distribute.InputContext] = None
                   ) -> tf.data.Dataset:
    """Batched, parsed features for `mode` (train repeats and shuffles).

    Under a strategy, pass the `input_context` given to
    `distribute_datasets_from_function`: the files (or, with fewer files than
    pipelines, the records) are sharded per input pipeline and the batch is
    the per-replica one.
    """
    if mode not in MODES:
      raise ValueError(f"mode {mode!r} is not one of {MODES}")
    is_training = mode == "train"
    batch_size = global_batch_size
    files = self.input_files(mode)
    ds = tf.data.Dataset.from_tensor_slices(files)
    if input_context and input_context.num_input_pipelines > 1:
      batch_size = input_context.get_per_replica_batch_size(global_batch_size)
      if len(files) >= input_context.num_input_pipelines:
        ds = ds.shard(input_context.num_input_pipelines,
                      input_context.input_pipeline_id)
        ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=4,
                           num_parallel_calls=tf.data.AUTOTUNE,
                           deterministic=not is_training)
      else:
        ds = ds.flat_map(tf.data.TFRecordDataset).shard(
            input_context.num_input_pipelines,
            input_context.input_pipeline_id)
    else:
      if input_context:
        batch_size = input_context.get_per_replica_batch_size(
            global_batch_size)
      ds = ds.flat_map(tf.data.TFRecordDataset)
    if is_training:
      ds = ds.shuffle(self.shuffle_buffer_size, seed=self.seed).repeat()
    ds = ds.batch(batch_size, drop_remainder=is_training)
    ds = ds.map(self.parse_examples, num_parallel_calls=tf.data.AUTOTUNE)
    if self.side_inputs_in_pipeline:
      ds = ds.map(self._add_side_inputs, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)

  def _add_side_inputs(self, features: Features) -> Features:
    side = self.side_inputs(features)
    return {**features, **{k: v for k, v in side.items() if v is not None}}

  def dummy_features(self, batch_size: int = 1) -> Features:
    """All-zero batched features (to build the model's variables)."""
    return {k: tf.zeros([batch_size] + s.shape[1:].as_list(), s.dtype)
            for k, s in self.model_input_spec().items()}

  # ----------------------------------------------------------------- model
  def build_encoder(self) -> tf_keras.layers.Layer:
    from etc_realformer import EtcModel  # pylint: disable=g-import-not-at-top
    return EtcModel(self.model_config)

  @abc.abstractmethod
  def build_model(self) -> EtcTaskModel:
    """The task model (encoder + head); variables may be created lazily."""

  # -------------------------------------------------------- loss & metrics
  def train_features(self, features: Features, step: tf.Tensor) -> Features:
    """The batch a training step sees (default: as read).

    A hook for training-only input curricula (e.g. the WikiHop demo's
    scaffold marks), applied by the trainer to each micro-batch before the
    forward pass. `step` is the optimizer's step counter (restored with the
    checkpoint, so a resumed run continues the schedule where it stopped).
    """
    del step
    return features

  @abc.abstractmethod
  def per_example_loss(self, features: Features,
                       outputs: Dict[str, tf.Tensor]) -> tf.Tensor:
    """float32 [B] training loss per example."""

  def build_metrics(self) -> List[tf_keras.metrics.Metric]:
    return []

  def update_metrics(self, metrics: List[tf_keras.metrics.Metric],
                     features: Features,
                     outputs: Dict[str, tf.Tensor]) -> None:
    del metrics, features, outputs

  # ------------------------------------------------------------ predictions
  def prediction_outputs(self, features: Features,
                         outputs: Dict[str, tf.Tensor]) -> Features:
    """Per-example tensors ([B, ...]) kept for `write_predictions`."""
    return dict(outputs)

  def write_predictions(self, predictions: Mapping[str, Any],
                        output_dir: str) -> str:
    """Writes the official submission file; returns its path.

    Args:
      predictions: name -> NumPy array, `prediction_outputs` concatenated
        over the whole predict set.
      output_dir: where to write.
    """
    raise NotImplementedError(f"{self.name} writes no predictions")

  # ----------------------------------------------------------------- export
  def serving_outputs(self, features: Features,
                      outputs: Dict[str, tf.Tensor]) -> Features:
    """What the serving signatures return."""
    del features
    return dict(outputs)

  def serving_signatures(self, model: EtcTaskModel
                         ) -> Dict[str, tf.types.experimental.ConcreteFunction]:
    """Signature name -> concrete function. Subclasses extend the dict.

    The functions close over `model`; the exporter attaches the model to the
    saved module so its variables are saved.
    """
    spec = self.model_input_spec()

    @tf.function(input_signature=[spec])
    def serving_default(features):
      return self.serving_outputs(features, model(features, training=False))

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="examples")])
    def serve_examples(examples):
      features = self.parse_examples(examples)
      outputs = model({k: features[k] for k in spec}, training=False)
      return self.serving_outputs(features, outputs)

    return {"serving_default": serving_default.get_concrete_function(),
            "serve_examples": serve_examples.get_concrete_function()}

  def export_assets(self) -> Dict[str, Any]:
    """Trackable objects (lookup tables, tokenizers) the signatures use."""
    return {}


class RawInputTask(Task):
  """A Task whose export adds raw-input signatures (all four tasks).

  Those signatures run the task's in-graph featurizer, built like
  preprocessing's from the task's `vocab_file` / `spm_model_file` /
  `lower_case` (set by the subclass). Without a vocabulary the export has
  only the base signatures. Subclasses provide `build_featurizer()` and
  `raw_serving_signatures(model, featurizer, names)`.
  """

  _featurizer = None
  # How the error of `featurizer` names what needs the vocabulary.
  raw_signatures_name = "raw-input signature"

  @property
  def has_vocabulary(self) -> bool:
    return bool(self.vocab_file or self.spm_model_file)

  @property
  def featurizer(self):
    """The in-graph featurizer (same settings as preprocessing)."""
    if self._featurizer is None:
      if not self.has_vocabulary:
        raise ValueError(f"{type(self).__name__}.vocab_file (or "
                         f"spm_model_file) is needed for the "
                         f"{self.raw_signatures_name}")
      self._featurizer = self.build_featurizer()
    return self._featurizer

  @abc.abstractmethod
  def build_featurizer(self):
    """A new featurizer with this task's settings."""

  @abc.abstractmethod
  def raw_serving_signatures(
      self, model: EtcTaskModel, featurizer, names: Tuple[str, ...]
  ) -> Dict[str, tf.types.experimental.ConcreteFunction]:
    """The raw-input signatures; `names` = `model_features()`."""

  def serving_signatures(self, model):
    signatures = super().serving_signatures(model)
    if self.has_vocabulary:  # No vocabulary: no raw-input signature.
      signatures.update(self.raw_serving_signatures(
          model, self.featurizer, self.model_features()))
    return signatures

  def export_assets(self) -> Dict[str, Any]:
    if not self.has_vocabulary:
      return {}
    return {"featurizer": self.featurizer}
