"""The Task interface: everything task-specific the trainer, evaluator,
predictor and exporter need, and the registry of tasks.

A task (WikiHop, HotpotQA, NQ, OpenKP, pre-training) subclasses `Task`,
registers itself with `@register_task("name")` (which also makes it gin
configurable) and provides:

* data: `feature_spec()` (the raw per-example features stored in TFRecords)
  and `side_input_source` (which raw features the ETC masks and relative ids
  come from;
  `etc_realformer.features.side_input_sources.SOURCE_FEATURES`). The base
  turns them into the input pipeline (`build_inputs`: TFRecords -> parsed,
  batched, sharded per worker) and into the side inputs, built inside the
  model from the raw features so that every exported signature takes raw
  features only.
* model: `build_model()` -> an `EtcTaskModel` (encoder + head).
* training: `per_example_loss(features, outputs)` (float32 [B]),
  `build_metrics()` / `update_metrics(...)`.
* predictions: `prediction_outputs(features, outputs)` (per-example tensors
  gathered over the predict set), `write_predictions(...)` (the official
  submission format) and `official_scores(...)` (the official metric of the
  eval set, where gold is known).
* export: `serving_outputs(features, outputs)` and `serving_signatures(model)`;
  the base gives `serving_default` (feature tensors) and `serve_examples`
  (serialized tf.Examples); `RawInputTask` adds raw-input signatures, which
  run the task's featurizer in the graph: one record's (`serve_raw`) and a
  batch's (`serve_raw_batch`: every input [B, ...], so that TF Serving can
  batch requests; `etc_realformer.export.batching`). All of them run the
  model through one traced `serving_forward`.

The runner (`tasks/run.py` -> `etc_realformer.training.experiment`) uses only
these methods: a new task is a folder `tasks/<name>/` and a gin file.
"""

import abc
import dataclasses
import numbers
from typing import (Any, Callable, Dict, List, Mapping, Optional, Tuple,
                    TypeVar)

import gin
import tensorflow as tf
import tf_keras

from etc_realformer import json_config
from etc_realformer.config import EtcConfig
from etc_realformer.data import tfrecords
from etc_realformer.errors import UserInputError
from etc_realformer.execution import ExecutionConfig
from etc_realformer.features import side_input_sources
from etc_realformer.features import side_inputs as side_inputs_lib
from etc_realformer.networks.etc_model import EtcModel

Features = Dict[str, tf.Tensor]
FeatureSpec = tfrecords.FeatureSpec

MODES = ("train", "eval", "predict")

# ------------------------------------------------------------------ registry
_TASKS: Dict[str, type] = {}
T = TypeVar("T", bound=type)


def register_task(name: str) -> Callable[[T], T]:
  """Class decorator: registers a `Task` under `name` and makes it gin
  configurable (bind `<ClassName>.<arg> = ...`, choose it with
  `task_class.cls = @<ClassName>`)."""
  def wrap(cls: T) -> T:
    if name in _TASKS and _TASKS[name].__qualname__ != cls.__qualname__:
      raise ValueError(f"task name {name!r} is taken by {_TASKS[name]}")
    cls.name = name
    configurable = gin.configurable(cls)
    _TASKS[name] = configurable
    return configurable
  return wrap


def registered_tasks() -> Dict[str, type]:
  """name -> Task class, for the tasks whose modules are imported."""
  return dict(_TASKS)


def get_task_class(name: str) -> type:
  if name not in _TASKS:
    raise ValueError(f"unknown task {name!r}; registered: {sorted(_TASKS)}")
  return _TASKS[name]


# ---------------------------------------------------------------- gin glue
def _check_field_names(cls: type, names, binding: str) -> None:
  """Raises UserInputError for a keyword that is no field of `cls` (gin
  cannot check the names of `**kwargs`)."""
  fields = {f.name for f in dataclasses.fields(cls)} - {"unknown_keys"}
  unknown = sorted(set(names) - fields)
  if unknown:
    raise UserInputError(
        f"{binding}.{unknown[0]}: {cls.__name__} has no field "
        f"{unknown[0]!r}; its fields: {', '.join(sorted(fields))}")


@gin.configurable
def etc_config(config_file: Optional[str] = None, **overrides: Any
               ) -> EtcConfig:
  """The encoder configuration, from gin (`etc_config.hidden_size = 768`).

  Args:
    config_file: optional `etc_config.json` (e.g. shipped with a released
      checkpoint); its values are the base, `overrides` win.
    **overrides: any `EtcConfig` field.

  Raises:
    UserInputError: a field that does not exist, a bad value, or no
      `vocab_size` (which no model gin file sets: it is the vocabulary's).
  """
  _check_field_names(EtcConfig, overrides, "etc_config")
  if config_file:
    return EtcConfig.from_json_file(config_file).replace(**overrides)
  if "vocab_size" not in overrides:
    raise UserInputError(
        "etc_config.vocab_size is not set: bind it to the vocabulary's size "
        "(--gin_bindings='etc_config.vocab_size = 30522'), or set "
        "etc_config.config_file to a released etc_config.json")
  return EtcConfig(**overrides)


@gin.configurable
def execution_config(**options: Any) -> ExecutionConfig:
  """How the encoder runs, from gin (`execution_config.attention_chunk_len =
  2048`); any `ExecutionConfig` field."""
  _check_field_names(ExecutionConfig, options, "execution_config")
  execution = ExecutionConfig(**options)
  json_config.check_field_types(execution, "execution_config")
  return execution


@gin.configurable
def task_class(cls=None):
  """The Task subclass to run (bind `task_class.cls = @WikiHopTask`).

  Raises:
    UserInputError: no task is bound.
  """
  if cls is None:
    names = ", ".join(f"@{c.__name__}" for c in _TASKS.values())
    raise UserInputError(
        "no task chosen: give a task's gin file (--gin_file=tasks/<name>.gin, "
        "or run python -m tasks.<name>) or bind task_class.cls to one of "
        f"{names}")
  return cls


# --------------------------------------------------------------------- model
class EtcTaskModel(tf_keras.Model):
  """Encoder + task head. `call(features)` -> dict of named outputs.

  The side inputs are built in the graph from the raw features by the task's
  `side_inputs` function unless the features already carry them (when a task
  builds them in the tf.data pipeline).
  """

  def __init__(self, encoder: tf_keras.layers.Layer,
               side_inputs_fn: Callable[[Features], Dict[str, Any]],
               **kwargs):
    super().__init__(**kwargs)
    # The attribute name `encoder` is part of the checkpoint's variable names
    # (`model/encoder/...`), which `checkpoints.initialization` relies on.
    self.encoder = encoder
    self._side_inputs_fn = side_inputs_fn

  def encode(self, features: Features, training: Optional[bool] = None
             ) -> Tuple[tf.Tensor, tf.Tensor]:
    """Returns long [B, L, H] and global [B, G, H] encoder outputs."""
    inputs = dict(features)
    if not all(k in inputs for k in side_inputs_lib.SIDE_INPUT_KEYS):
      side = self._side_inputs_fn(features)
      inputs.update({k: v for k, v in side.items() if v is not None})
    return self.encoder(inputs, training=training)

  # Encoder and head traced without AutoGraph, as EtcModel.call.
  @tf.autograph.experimental.do_not_convert
  def call(self, features: Features, training: Optional[bool] = None
           ) -> Dict[str, tf.Tensor]:
    long_output, global_output = self.encode(features, training=training)
    return self.head(features, long_output, global_output, training=training)

  def head(self, features: Features, long_output: tf.Tensor,
           global_output: tf.Tensor, training: Optional[bool] = None
           ) -> Dict[str, tf.Tensor]:
    """Task outputs from the encoder outputs; logits in float32."""
    raise NotImplementedError


# ---------------------------------------------------------------------- task
class Task(abc.ABC):
  """Base class of the tasks (see the module docstring)."""

  name: str = "task"
  # Which raw features the side inputs come from
  # (`etc_realformer.features.side_input_sources.SOURCE_FEATURES`).
  side_input_source: str = "breakpoints"

  def __init__(self,
               model_config: Optional[EtcConfig] = None,
               execution: Optional[ExecutionConfig] = None,
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
      execution: how the encoder runs; None = `execution_config()` from gin.
      long_seq_len: L, the long input length of the TFRecords.
      global_seq_len: G, the global input length.
      train_input, eval_input, predict_input: TFRecord file patterns
        (comma-separated patterns allowed).
      shuffle_buffer_size: training shuffle buffer (examples).
      side_inputs_in_pipeline: build side inputs in tf.data (host CPU) instead
        of the model graph (useful on TPU).
      seed: shuffle seed (None = nondeterministic).
    """
    cls = type(self).__name__
    for setting, value in (("long_seq_len", long_seq_len),
                           ("global_seq_len", global_seq_len),
                           ("shuffle_buffer_size", shuffle_buffer_size)):
      if (not isinstance(value, numbers.Integral) or
          isinstance(value, bool) or value < 1):
        raise UserInputError(f"{cls}.{setting}: must be a positive integer, "
                             f"got {value!r}")
    if seed is not None and (not isinstance(seed, numbers.Integral) or
                             isinstance(seed, bool)):
      raise UserInputError(f"{cls}.seed: must be an integer or None, got "
                           f"{seed!r}")
    self.model_config = model_config or etc_config()
    self.execution = execution or execution_config()
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

    The format of `etc_realformer.data.tfrecords` (shape `(None,)` =
    variable length); unbatched shapes, e.g. `[L]`, `[G]`, `[]`.
    """

  def side_inputs(self, features: Features) -> Dict[str, Optional[tf.Tensor]]:
    """The eight side inputs from batched raw features ([B, L] / [B, G])."""
    return side_input_sources.from_features(self.model_config, features,
                                 self.side_input_source)

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
    """Parses a batch of serialized tf.Examples [B] with `feature_spec()`."""
    return tfrecords.parse(serialized, self.feature_spec())

  def input_files(self, mode: str) -> List[str]:
    """The TFRecord files of `mode`'s input; the first file's first record
    is checked against `feature_spec()` (its lengths against the task's).

    Raises:
      UserInputError: no input is set for `mode`, a pattern matches no
        file, or the first record does not fit the task.
    """
    setting = f"{type(self).__name__}.{mode}_input"
    pattern = self.input_patterns.get(mode)
    if not pattern:
      raise UserInputError(f"{self.name}: no input files for mode {mode!r}; "
                           f"set {setting} in gin")
    try:
      files = tfrecords.match_files(pattern)
    except tfrecords.NoMatchingFileError as e:
      raise tfrecords.NoMatchingFileError(f"{setting}: {e}") from e
    if tf.executing_eagerly():  # Not while a function traces the pipeline.
      tfrecords.check_first_record(files[0], self.feature_spec(),
                                   hint=self.lengths_hint())
    return files

  def lengths_hint(self) -> str:
    """How a length mismatch of the TFRecords is named: the settings that
    give the task's lengths."""
    cls = type(self).__name__
    return (f"made at other lengths than {cls}.long_seq_len = "
            f"{self.long_seq_len}, {cls}.global_seq_len = "
            f"{self.global_seq_len}?")

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
    # The pipeline's functions are straight-line code: traced without
    # AutoGraph, which would convert them and all they call in every process.
    ds = ds.map(tf.autograph.experimental.do_not_convert(self.parse_examples),
                num_parallel_calls=tf.data.AUTOTUNE)
    if self.side_inputs_in_pipeline:
      ds = ds.map(
          tf.autograph.experimental.do_not_convert(self._add_side_inputs),
          num_parallel_calls=tf.data.AUTOTUNE)
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
    return EtcModel(self.model_config, self.execution)

  @abc.abstractmethod
  def build_model(self) -> EtcTaskModel:
    """The task model (encoder + head); variables may be created lazily."""

  # -------------------------------------------------------- loss & metrics
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

  def has_official_scores(self) -> bool:
    """Whether `official_scores` can score the eval set (the runner skips
    the predict pass otherwise); by default, whether the task defines it.
    Tasks whose gold comes from a file override it."""
    return type(self).official_scores is not Task.official_scores

  def official_scores(self, predictions: Mapping[str, Any],
                      output_dir: str) -> Optional[Dict[str, Any]]:
    """The task's official metric of predictions made on the eval set.

    Args:
      predictions: as `write_predictions` (which has written them to
        `output_dir`).
      output_dir: where reports go.

    Returns:
      A JSON-able summary (one line of it is printed by the runner), or None
      when no gold is available.
    """
    del predictions, output_dir
    return None

  # ----------------------------------------------------------------- export
  def serving_outputs(self, features: Features,
                      outputs: Dict[str, tf.Tensor]) -> Features:
    """What the serving signatures return."""
    del features
    return dict(outputs)

  def serving_signatures(self, model: EtcTaskModel
                         ) -> Dict[str, tf.types.experimental.ConcreteFunction]:
    """Signature name -> concrete function: the base's two and the
    subclass's `extra_serving_signatures`.

    Every signature calls the model through one `serving_forward`: the
    export traces the model once, and the SavedModel holds one copy of its
    graph rather than one per signature. The exporter saves the model's
    variables beside them.
    """
    spec = self.model_input_spec()
    forward = serving_forward(model, spec)

    @tf.function(input_signature=[spec])
    def serving_default(features):
      return self.serving_outputs(features, forward(features))

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="examples")])
    def serve_examples(examples):
      features = self.serving_features(examples)
      return self.serving_outputs(features, forward(features))

    signatures = {"serving_default": serving_default.get_concrete_function(),
                  "serve_examples": serve_examples.get_concrete_function()}
    signatures.update(self.extra_serving_signatures(forward))
    return signatures

  def extra_serving_signatures(
      self, forward: "ServingForward"
  ) -> Dict[str, tf.types.experimental.ConcreteFunction]:
    """A subclass's own signatures; they run the model with `forward`."""
    del forward  # Unused.
    return {}

  def serving_features(self, examples: tf.Tensor) -> Features:
    """`serve_examples`' features from <string>[batch] serialized
    tf.train.Examples (as stored by preprocessing)."""
    return self.parse_examples(examples)

  def export_assets(self) -> Dict[str, Any]:
    """Trackable objects (lookup tables, tokenizers) the signatures use."""
    return {}


ServingForward = Callable[[Mapping[str, tf.Tensor]], Dict[str, tf.Tensor]]


def serving_forward(model: EtcTaskModel,
                    spec: Mapping[str, tf.TensorSpec]) -> ServingForward:
  """`model(features, training=False)` as one `tf.function` over `spec`
  (the batch dimension free): features (extra keys ignored) -> outputs.

  Signatures that call it share its one trace: an export with three
  signatures traces the model once, and its SavedModel stores the model's
  graph once.
  """
  @tf.function(input_signature=[dict(spec)])
  def forward(features):
    return model(features, training=False)

  return lambda features: forward({k: features[k] for k in spec})


class RawInputTask(Task):
  """A Task whose export adds raw-input signatures.

  Those signatures run the task's in-graph featurizer, built like
  preprocessing's from the task's `vocab_file` / `spm_model_file` /
  `lower_case` (set by the subclass). Without a vocabulary the export has
  only the base signatures. Subclasses provide `build_featurizer()` and
  `raw_serving_signatures(forward, featurizer, names)`: `serve_raw`, one
  record's raw fields, and `serve_raw_batch`, B records with every input
  [B, ...] (variable-length parts padded, with per-record counts, checked
  by `etc_realformer.export.batching`) and per-record outputs [B, ...]
  equal to `serve_raw`'s; `etc_realformer/export/README.md` lists them.
  """

  _featurizer = None
  # How the error of `featurizer` names what needs the vocabulary.
  raw_signatures_name = "raw-input signature"

  def __init__(self, vocab_file: Optional[str] = None,
               spm_model_file: Optional[str] = None,
               lower_case: bool = True, **kwargs):
    """Args:
      vocab_file: the WordPiece vocab.txt of preprocessing; needed for the
        raw-input signatures.
      spm_model_file: a SentencePiece model instead of `vocab_file`.
      lower_case: as in preprocessing.
      **kwargs: `Task` arguments.
    """
    super().__init__(**kwargs)
    self.vocab_file = vocab_file
    self.spm_model_file = spm_model_file
    self.lower_case = lower_case

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

  def featurizer_kwargs(self) -> Dict[str, Any]:
    """The featurizer arguments every raw-input task shares with
    preprocessing: the vocabulary, the lengths and the casing."""
    return dict(vocab_path=self.vocab_file,
                spm_model_path=self.spm_model_file,
                long_seq_len=self.long_seq_len,
                global_seq_len=self.global_seq_len,
                lower_case=self.lower_case)

  @abc.abstractmethod
  def build_featurizer(self):
    """A new featurizer with this task's settings (`featurizer_kwargs()`
    and the task's own)."""

  @abc.abstractmethod
  def raw_serving_signatures(
      self, forward: "ServingForward", featurizer, names: Tuple[str, ...]
  ) -> Dict[str, tf.types.experimental.ConcreteFunction]:
    """The raw-input signatures (see the class docstring); they run the
    model with `forward` on the featurized records, all of a batch in one
    call; `names` = `model_features()`."""

  def extra_serving_signatures(self, forward):
    if not self.has_vocabulary:  # No vocabulary: no raw-input signature.
      return {}
    return self.raw_serving_signatures(forward, self.featurizer,
                                       self.model_features())

  def export_assets(self) -> Dict[str, Any]:
    if not self.has_vocabulary:
      return {}
    return {"featurizer": self.featurizer}


