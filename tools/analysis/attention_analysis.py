r"""Attention entropy and adjacent-layer JSD of ETC checkpoints, as the
RealFormer paper analysed BERT.

    python -m tools.analysis.attention_analysis --checkpoint=etc_base \
        [--checkpoint=etc_realformer_base --label=ETC --label=ETC-RealFormer] \
        --data='wikihop/dev-*.tfrecord' --output_dir=analysis \
        [--config=etc_config.json] [--max_examples=1000] [--batch_size=1]

--checkpoint (repeatable) is any checkpoint a task's `init_checkpoint`
takes (`etc_realformer.checkpoints.initialization`): a TF2 checkpoint of a
task model or a bare encoder, a released ETC one, or one lifted by
`tools/checkpoints/lift_checkpoint.py`; a directory or a prefix. Its model
config is --config (one for all, or one per checkpoint, in order), else the
`etc_config.json` beside the checkpoint. --data is a glob (comma-separated globs
allowed) of a task's preprocessed feature TFRecords: the model's features are
read by their names (their lengths from the first record), and the side inputs
are built the task's way, from the side-input source whose features the
records hold (--side_input_source when several fit). Padding tokens
(--pad_token_id on the long or
global branch) and fully masked rows are left out and counted. The model runs with
`return_attention_probs=True` on the encoder alone: inputs a task's head adds to
the embeddings (OpenKP's visual features) are not applied.

OUT receives `attention_stats.json` (per checkpoint, branch, layer and head:
median, quartiles, mean, count, min, max and colour; per branch the rows left
out and the keys per row), `entropy.png` and, for two layers or more,
`jsd.png`: one row per layer (JSD: per pair of adjacent layers), one column
per checkpoint and query branch, one violin per head, heads sorted by median
within a row and coloured by it (`tools/analysis/attention_stats.py` has the
definitions, the thresholds and the streaming summaries: fixed histograms,
quantiles exact up to one bin width, mean and count exact).
"""

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from absl import flags
from absl import logging
import tensorflow as tf

from etc_realformer import cli
from etc_realformer.checkpoints import converted
from etc_realformer.checkpoints import initialization
from etc_realformer.checkpoints.paths import resolve_checkpoint_path
from etc_realformer.config import EtcConfig
from etc_realformer.data import tfrecords
from etc_realformer.errors import UserInputError
from etc_realformer.execution import ExecutionConfig
from etc_realformer.features import side_input_sources
from etc_realformer.features import side_inputs as side_inputs_lib
from etc_realformer.networks.etc_model import EtcModel
from tools.analysis import attention_stats as stats

FLAGS = flags.FLAGS
REQUIRED_FLAGS = ("checkpoint", "data", "output_dir")


def define_flags() -> None:
  """The binary's flags; defined only when run as one (other binaries share
  names such as --output_dir)."""
  flags.DEFINE_multi_string("checkpoint", None, "A checkpoint (directory "
                            "or prefix); repeat to compare several.")
  flags.DEFINE_multi_string("label", None, "One label per --checkpoint "
                            "(default: the checkpoint's name).")
  flags.DEFINE_multi_string("config", None, "etc_config.json: one for all "
                            "checkpoints or one per checkpoint (default: "
                            "beside each checkpoint).")
  flags.DEFINE_string("data", None, "Glob(s) of a task's feature TFRecords.")
  flags.DEFINE_string("output_dir", None, "Where the JSON and plots go.")
  flags.DEFINE_enum("side_input_source", None,
                    sorted(side_input_sources.SOURCE_FEATURES),
                    "The side-input source (default: the one whose features "
                    "the records hold).")
  flags.DEFINE_integer("max_examples", 1000, "Examples read (<= 0: all).")
  flags.DEFINE_integer("batch_size", 1, "Examples per forward pass (every "
                       "layer's probabilities of a batch are alive at once).")
  flags.DEFINE_integer("pad_token_id", 0, "Long and global tokens with this "
                       "id are padding (-1: none).")
  flags.DEFINE_integer("histogram_bins", 2048, "Bins of each (branch, layer, "
                       "head) histogram; quantiles are exact up to "
                       "range / bins.")
  flags.DEFINE_enum("att_implementation", None, ["auto", "sparse", "full"],
                    "Overrides the attention path (default: "
                    "ExecutionConfig).")


JSON_NAME = "attention_stats.json"
# The features the encoder reads besides the side inputs' sources.
_MODEL_INPUTS = ("token_ids", "global_token_ids", "segment_ids",
                 "global_segment_ids", "position_ids", "global_position_ids")
_OPTIONAL_LAYOUT_INPUTS = ("l2g_linked_ids",)
_TOKENS = {"long": "token_ids", "global": "global_token_ids"}


@dataclasses.dataclass
class Source:
  """One checkpoint to analyse."""
  label: str
  path: str
  prefix: str
  config_path: str
  config: EtcConfig
  kind: str = ""  # set when loaded (`CheckpointKind` value)


# ------------------------------------------------------------------ inputs
def resolve_sources(checkpoints: Sequence[str], labels: Sequence[str],
                    configs: Sequence[str]) -> List[Source]:
  """Checkpoints with their labels and configs; every mistake up front."""
  if not checkpoints:
    raise UserInputError("--checkpoint: give at least one")
  if labels and len(labels) != len(checkpoints):
    raise UserInputError(f"--label: {len(labels)} given for "
                         f"{len(checkpoints)} checkpoints")
  if configs and len(configs) not in (1, len(checkpoints)):
    raise UserInputError(f"--config: give one, or one per checkpoint "
                         f"({len(checkpoints)}); got {len(configs)}")
  sources = []
  for i, path in enumerate(checkpoints):
    prefix = resolve_checkpoint_path(path)
    if configs:
      config_path = configs[i if len(configs) > 1 else 0]
    else:
      # In the directory given, or in the one of the prefix it resolves to.
      near = [os.path.join(d, converted.CONFIG_NAME) for d in (
          [path] if tf.io.gfile.isdir(path) else []) + [
              os.path.dirname(prefix)]]
      config_path = next((p for p in near if tf.io.gfile.exists(p)), None)
      if config_path is None:
        raise UserInputError(f"{path}: no {converted.CONFIG_NAME} beside the "
                             "checkpoint; pass --config")
    label = labels[i] if labels else (
        os.path.basename(os.path.normpath(path)) or f"checkpoint {i}")
    sources.append(Source(label, path, prefix, config_path,
                          EtcConfig.from_json_file(config_path)))
  names = [s.label for s in sources]
  if len(set(names)) < len(names):
    for i, source in enumerate(sources):
      source.label = f"{source.label} ({i})"
  return sources


def read_spec(files: Sequence[str], side_input_source: Optional[str]
              ) -> Tuple[tfrecords.FeatureSpec, str]:
  """The feature spec of the model's inputs (lengths from the first record)
  and the side-input source."""
  # Lazily: the first file that holds a record is the only one read.
  example = next((e for e in map(tfrecords.first_example, files)
                  if e is not None), None)
  if example is None:
    raise UserInputError(f"--data: no records in {list(files)[:3]}")
  feature = example.features.feature
  known = set(_MODEL_INPUTS + _OPTIONAL_LAYOUT_INPUTS).union(
      *side_input_sources.SOURCE_FEATURES.values())
  spec = {name: (tf.int32, (len(feature[name].int64_list.value),))
          for name in sorted(known) if name in feature and
          feature[name].WhichOneof("kind") == "int64_list"}
  missing = [k for k in _TOKENS.values() if k not in spec]
  if missing:
    raise UserInputError(f"--data: {files[0]}: the records have no "
                         f"{missing} (int64 features)")
  sources = side_input_sources.SOURCE_FEATURES
  fits = [name for name, needed in sorted(sources.items())
          if all(k in spec for k in needed)]
  if side_input_source is None:
    if len(fits) != 1:
      raise UserInputError(
          f"--data: the records fit the side-input sources {fits}; pass "
          f"--side_input_source (one of {sorted(sources)})")
    side_input_source = fits[0]
  elif side_input_source not in fits:
    lacking = [k for k in sources[side_input_source] if k not in spec]
    raise UserInputError(f"--side_input_source={side_input_source}: the "
                         f"records lack {lacking}")
  return spec, side_input_source


def _batches(dataset: tf.data.Dataset):
  """The dataset's batches; a record that does not parse is a user error."""
  iterator = iter(dataset)
  while True:
    try:
      batch = next(iterator)
    except StopIteration:
      return
    except tf.errors.InvalidArgumentError as e:
      raise UserInputError(f"--data: a record does not parse with the first "
                           f"record's lengths: {e.message.splitlines()[0]}"
                           ) from e
    yield batch


# ------------------------------------------------------------------- model
def load_model(source: Source) -> EtcModel:
  """The checkpoint's encoder, through the trainer's initialisation (any
  kind); a checkpoint that does not fit its config is a user error."""
  model = EtcModel(source.config, ExecutionConfig())
  model.build()
  try:
    kind = initialization.checkpoint_kind(source.prefix)
    if kind == initialization.CheckpointKind.TF2_ENCODER:
      # `initialize_encoder` rejects encoders written with
      # `Checkpoint.write` (no save_counter), as the converter writes them.
      converted.load_converted_checkpoint(model, source.prefix)
    else:
      initialization.initialize_encoder(model, source.prefix)
  except UserInputError:
    raise
  except (AssertionError, ValueError) as e:
    raise UserInputError(f"{source.path}: the checkpoint does not fit "
                         f"{source.config_path}: "
                         f"{str(e).strip().splitlines()[0]}") from e
  source.kind = kind.value
  return model


def _step_fn(model: EtcModel, spec: tfrecords.FeatureSpec,
             side_input_source: str,
             att_implementation: Optional[str]):
  """The per-row statistics of a batch, traced once for any batch size (the
  model needs no autograph: its graph code is plain TF)."""
  config = model.config
  signature = {k: tf.TensorSpec([None, *shape], dtype)
               for k, (dtype, shape) in spec.items()}

  @tf.function(input_signature=[signature], autograph=False)
  def step(features):
    side_inputs = side_input_sources.from_features(config, features,
                                                   side_input_source)
    inputs = dict(features, **side_inputs_lib.drop_none_values(side_inputs))
    if not config.max_absolute_position_embeddings:
      inputs.pop("position_ids", None)
      inputs.pop("global_position_ids", None)
    out = model.encode(inputs, training=False, return_attention_probs=True,
                       att_implementation=att_implementation)
    return stats.layer_statistics(out.attention_probs, side_inputs,
                                  config.local_radius)
  return step


def analyse(source: Source, dataset: tf.data.Dataset,
            spec: tfrecords.FeatureSpec, side_input_source: str,
            pad_token_id: int, bins: int,
            att_implementation: Optional[str] = None
            ) -> Tuple[Dict[str, stats.BranchSummary], int]:
  """Streams the dataset through one checkpoint; (branch -> stats,
  examples)."""
  model = load_model(source)
  config = model.config
  long_len, global_len = spec["token_ids"][1][0], spec["global_token_ids"][1][0]
  layers, heads = config.num_hidden_layers, config.num_attention_heads
  max_keys = {"long": min(2 * config.local_radius + 1, long_len) + global_len,
              "global": global_len + long_len}
  branches = {name: stats.BranchSummary(name, layers, heads, max_keys[name],
                                        bins)
              for name in stats.BRANCHES}
  step = _step_fn(model, spec, side_input_source, att_implementation)
  examples = 0
  for i, features in enumerate(_batches(dataset)):
    out = step(features)
    examples += int(features["token_ids"].shape[0])
    for name, branch in branches.items():
      branch.add(tf.nest.map_structure(lambda t: t.numpy(), out[name]),
                 features[_TOKENS[name]].numpy() == pad_token_id)
    if (i + 1) % 50 == 0:
      logging.info("%s: %d examples", source.label, examples)
  return branches, examples


# ------------------------------------------------------------------ output
def plot(results: Sequence[Dict[str, Any]], metric: str, path: str) -> None:
  """Violins of `metric` ("entropy" or "jsd"): a row per layer (pair), a
  column per (checkpoint, branch), a violin per head sorted by median."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  columns = [(r, name) for r in results for name in stats.BRANCHES]
  rows = max(getattr(r["branches"][n], metric).num_layers for r, n in columns)
  heads = max(getattr(r["branches"][n], metric).num_heads for r, n in columns)
  fig, axes = plt.subplots(
      rows, len(columns), squeeze=False,
      figsize=(len(columns) * max(3.0, 0.3 * heads + 1.2), 1.3 * rows + 1.0))
  for col, (result, name) in enumerate(columns):
    branch = result["branches"][name]
    summary = getattr(branch, metric)
    thresholds = branch.thresholds(metric)
    a, b = stats.BRANCHES[name]
    axes[0, col].set_title(f"{result['label']}\n{name} queries ({a}+{b})",
                           fontsize=9)
    for row in range(rows):
      ax = axes[row, col]
      if row >= summary.num_layers:
        ax.axis("off")
        continue
      medians = [summary.summary(row, h)["median"]
                 for h in range(summary.num_heads)]
      order = sorted(range(summary.num_heads),
                     key=lambda h: (medians[h] is None, medians[h] or 0.0))
      for pos, head in enumerate(order):
        shape = summary.density(row, head)
        if shape is None:
          continue
        s = summary.summary(row, head)
        body = ax.violin([dict(coords=shape[0], vals=shape[1], mean=s["mean"],
                               median=s["median"], min=s["min"],
                               max=s["max"])], positions=[pos], widths=0.8,
                         showextrema=False)
        for patch in body["bodies"]:
          patch.set_facecolor(stats.COLOURS[stats.colour_class(
              s["median"], thresholds)])
          patch.set_edgecolor("black")
          patch.set_linewidth(0.4)
          patch.set_alpha(0.9)
        ax.vlines(pos, s["q1"], s["q3"], colors="black", linewidth=2)
        ax.scatter([pos], [s["median"]], color="white", s=6, zorder=3)
      for t in thresholds:
        ax.axhline(t, color="grey", linewidth=0.5, linestyle="--")
      ax.set_ylim(0, summary.upper)
      ax.set_xticks(range(len(order)))
      ax.set_xticklabels([str(h) for h in order], fontsize=6)
      ax.tick_params(axis="y", labelsize=6)
      if name == "long":  # each checkpoint's first column
        ax.set_ylabel(f"layers {row}-{row + 1}" if metric == "jsd"
                      else f"layer {row}", fontsize=7)
  fig.suptitle(("entropy (nats)" if metric == "entropy" else
                "JSD between adjacent layers (nats)") +
               "; heads sorted by median", fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def run_analysis(checkpoints: Sequence[str], data: str, output_dir: str,
                 labels: Sequence[str] = (), configs: Sequence[str] = (),
                 side_input_source: Optional[str] = None,
                 max_examples: int = 1000,
                 batch_size: int = 1, pad_token_id: int = 0,
                 bins: int = 2048, att_implementation: Optional[str] = None
                 ) -> Dict[str, Any]:
  """Analyses every checkpoint on the same examples; writes OUT; returns
  the JSON written."""
  if batch_size < 1 or bins < 1:
    raise UserInputError("--batch_size and --histogram_bins must be >= 1")
  sources = resolve_sources(checkpoints, labels, configs)
  files = tfrecords.match_files(data)
  spec, side_input_source = read_spec(files, side_input_source)
  long_len, global_len = spec["token_ids"][1][0], spec["global_token_ids"][1][0]
  dataset = tfrecords.make_dataset(files, spec)
  if max_examples > 0:
    dataset = dataset.take(max_examples)
  dataset = dataset.batch(batch_size).prefetch(2)
  results, entries = [], []
  for source in sources:
    branches, examples = analyse(source, dataset, spec, side_input_source,
                                 pad_token_id, bins, att_implementation)
    results.append({"label": source.label, "branches": branches})
    config = source.config
    entries.append({
        "label": source.label, "checkpoint": source.prefix,
        "checkpoint_kind": source.kind, "config": source.config_path,
        "residual_attention": config.residual_attention,
        "num_layers": config.num_hidden_layers,
        "num_heads": config.num_attention_heads,
        "local_radius": config.local_radius, "examples": examples,
        "branches": {n: s.to_json() for n, s in branches.items()}})
  report = {
      "data": {"files": files, "side_input_source": side_input_source,
               "long_len": long_len,
               "global_len": global_len, "pad_token_id": pad_token_id,
               "max_examples": max_examples},
      "method": {
          "units": "nats",
          "entropy": "per row, over the branch's two patterns' keys (one "
                     "softmax); 0 <= H <= ln K, K the row's unmasked keys",
          "jsd": "per row, the same head in layers l and l + 1",
          "left_out": "padding tokens and fully masked rows (counted)",
          "quantiles": "from fixed histograms, exact up to one bin width "
                       "(*_bin_width); mean, count, min and max exact",
          "histogram_bins": bins,
          "entropy_thresholds": "1.5 and 4.5 nats times mean(ln K) / ln 512",
          "jsd_thresholds": list(stats.JSD_THRESHOLDS)},
      "checkpoints": entries}
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, JSON_NAME), "w") as f:
    json.dump(report, f, indent=2, sort_keys=True)
  plot(results, "entropy", os.path.join(output_dir, "entropy.png"))
  if any(r["branches"]["long"].jsd.num_layers for r in results):
    plot(results, "jsd", os.path.join(output_dir, "jsd.png"))
  return report


def main(argv):
  if len(argv) > 1:
    raise UserInputError(f"unexpected arguments: {argv[1:]}")
  f = FLAGS
  missing = [f"--{n}" for n in REQUIRED_FLAGS if not f[n].value]
  if missing:
    raise UserInputError(f"{', '.join(missing)} required")
  report = run_analysis(
      f.checkpoint, f.data, f.output_dir, labels=f.label or (),
      configs=f.config or (), side_input_source=f.side_input_source,
      max_examples=f.max_examples,
      batch_size=f.batch_size, pad_token_id=f.pad_token_id,
      bins=f.histogram_bins, att_implementation=f.att_implementation)
  for entry in report["checkpoints"]:
    print(f"{entry['label']}: {entry['examples']} examples, "
          f"{entry['branches']['long']['rows']} long and "
          f"{entry['branches']['global']['rows']} global rows")
  print(f"wrote {os.path.join(f.output_dir, JSON_NAME)}")


if __name__ == "__main__":
  define_flags()
  cli.run(main)
