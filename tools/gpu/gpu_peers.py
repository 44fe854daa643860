r"""Times the PyTorch long-document peers at the GPU benchmark's shapes.

    python -m tools.gpu.gpu_peers --shapes=4096:256:4,16384:1024:1 \
        --models=bigbird,longformer,bert_sdpa [--layers=12] [--repeats=10]

Beside `tools.gpu.xla_runner` (our encoder's XLA module), on a machine with
PyTorch and transformers (no TensorFlow, no library import): each model is
built from a config of the benchmark's width and depth (hidden 768, 12
heads, FFN 3072 unless flags say otherwise), in training mode (dropout 0.1),
under `torch.autocast(bfloat16)`; a step is the gradient of the mean square
of the last hidden state with respect to every weight, on random token ids;
timed as the median of `--repeats` calls after `--warmup`, each ended by a
device synchronisation; peak memory from `torch.cuda.max_memory_allocated`.

* `bigbird`: `BigBirdModel`, `attention_type="block_sparse"`, block size 64,
  3 random blocks, over the L long tokens.
* `longformer`: `LongformerModel`, window 512 on every layer, the first G
  tokens global.
* `bert_sdpa`: `BertModel` with `attn_implementation="sdpa"` (FlashAttention
  where the device has it) over the L tokens, all-ones attention mask: dense
  attention, the reference every sparse model must beat.

One JSON record per (model, shape) is printed and appended to
`--output_jsonl`; a model that fails (e.g. out of memory) is recorded with
its error and the sweep goes on.
"""

import argparse
import itertools
import sys
import traceback
from typing import Any, Dict, List, Optional, Tuple

from tools.bench.timing import emit, time_calls

MODELS = ("bigbird", "longformer", "bert_sdpa")


def parse_shapes(text: str) -> List[Tuple[int, int, int]]:
  """"L:G:batch,..." -> [(L, G, batch), ...]."""
  shapes = []
  for item in text.split(","):
    parts = item.strip().split(":")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
      raise ValueError(f"shape {item!r} is not L:G:batch")
    shapes.append(tuple(int(p) for p in parts))
  return shapes


def model_config(name: str, long_len: int, global_len: int,
                 width: Dict[str, int]):
  """The transformers config of one peer (imports transformers)."""
  import transformers  # pylint: disable=g-import-not-at-top
  common = dict(vocab_size=width["vocab_size"],
                hidden_size=width["hidden_size"],
                num_hidden_layers=width["layers"],
                num_attention_heads=width["heads"],
                intermediate_size=width["intermediate_size"],
                hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
  if name == "bigbird":
    return transformers.BigBirdConfig(
        attention_type="block_sparse", block_size=64, num_random_blocks=3,
        max_position_embeddings=long_len, **common)
  if name == "longformer":
    return transformers.LongformerConfig(
        attention_window=[512] * width["layers"],
        max_position_embeddings=long_len + 2, **common)
  if name == "bert_sdpa":
    config = transformers.BertConfig(max_position_embeddings=long_len,
                                     **common)
    config._attn_implementation = "sdpa"  # pylint: disable=protected-access
    return config
  raise ValueError(f"unknown model {name!r}; choose from {MODELS}")


def build(name: str, config):
  import transformers  # pylint: disable=g-import-not-at-top
  cls = {"bigbird": transformers.BigBirdModel,
         "longformer": transformers.LongformerModel,
         "bert_sdpa": transformers.BertModel}[name]
  # No pooler: the loss reads the last hidden state only.
  return cls(config, add_pooling_layer=False)


def measure(name: str, long_len: int, global_len: int, batch: int,
            width: Dict[str, int], repeats: int, warmup: int,
            device: str, autocast: bool = True,
            pass_: str = "fwd_bwd") -> Dict[str, Any]:
  """One (model, shape): median seconds of the pass ("fwd_bwd": training
  mode, the gradient of every weight; "fwd": eval mode, no gradient, as
  the encoder benchmark's fwd) and peak memory."""
  import torch  # pylint: disable=g-import-not-at-top
  torch.manual_seed(0)
  model = build(name, model_config(name, long_len, global_len, width))
  model.to(device).train(pass_ == "fwd_bwd")
  ids = torch.randint(1, width["vocab_size"], (batch, long_len),
                      device=device)
  inputs = {"input_ids": ids,
            "attention_mask": torch.ones_like(ids)}
  if name == "longformer":
    global_mask = torch.zeros_like(ids)
    global_mask[:, :global_len] = 1
    inputs["global_attention_mask"] = global_mask
  params = [p for p in model.parameters() if p.requires_grad]
  cuda = device.startswith("cuda")

  def step():
    with torch.autocast(device_type="cuda" if cuda else "cpu",
                        dtype=torch.bfloat16, enabled=autocast), \
        torch.set_grad_enabled(pass_ == "fwd_bwd"):
      hidden = model(**inputs).last_hidden_state
      loss = hidden.float().square().mean()
    grads = None
    if pass_ == "fwd_bwd":
      # Weights the step does not reach (e.g. position rows past L) get
      # none.
      grads = torch.autograd.grad(loss, params, allow_unused=True)
    if cuda:
      torch.cuda.synchronize()
    return loss, grads

  if cuda:
    torch.cuda.reset_peak_memory_stats()
  record = time_calls(step, warmup, repeats)
  if cuda:
    record["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    record["device_name"] = torch.cuda.get_device_name()
  return record


def main(argv: Optional[List[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--shapes", default="4096:256:4,16384:1024:1",
                      help="comma list of L:G:batch")
  parser.add_argument("--models", default=",".join(MODELS))
  parser.add_argument("--layers", type=int, default=12)
  parser.add_argument("--hidden_size", type=int, default=768)
  parser.add_argument("--heads", type=int, default=12)
  parser.add_argument("--intermediate_size", type=int, default=3072)
  parser.add_argument("--vocab_size", type=int, default=30522)
  parser.add_argument("--repeats", type=int, default=10)
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--device", default=None,
                      help="torch device (default: cuda if available)")
  parser.add_argument("--dtype", choices=("bfloat16", "float32"),
                      default="bfloat16",
                      help="bfloat16: torch.autocast (the benchmark's spec)")
  parser.add_argument("--passes", default="fwd_bwd",
                      help="comma list: fwd_bwd (training step), fwd (eval "
                      "forward, no gradient)")
  parser.add_argument("--output_jsonl", default=None)
  args = parser.parse_args(argv)
  passes = [p.strip() for p in args.passes.split(",") if p.strip()]
  if not passes or any(p not in ("fwd", "fwd_bwd") for p in passes):
    parser.error(f"--passes: fwd, fwd_bwd, got {args.passes!r}")
  try:
    shapes = parse_shapes(args.shapes)
  except ValueError as e:
    parser.error(str(e))
  models = [m.strip() for m in args.models.split(",") if m.strip()]
  bad = [m for m in models if m not in MODELS]
  if bad:
    parser.error(f"unknown models {bad}; choose from {MODELS}")
  import torch  # pylint: disable=g-import-not-at-top
  device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
  width = dict(layers=args.layers, hidden_size=args.hidden_size,
               heads=args.heads, intermediate_size=args.intermediate_size,
               vocab_size=args.vocab_size)
  for (long_len, global_len, batch), name, pass_ in itertools.product(
      shapes, models, passes):
    record = {"record_type": "gpu_peer", "model": name,
              "long_len": long_len, "global_len": global_len,
              "batch_size": batch, "device": device, **width,
              "pass": pass_,
              "dtype": ("bfloat16 autocast" if args.dtype == "bfloat16"
                        else "float32"),
              "torch_version": torch.__version__}
    try:
      record.update(measure(name, long_len, global_len, batch, width,
                            args.repeats, args.warmup, device,
                            autocast=args.dtype == "bfloat16",
                            pass_=pass_))
      record["status"] = "ok"
    except Exception as e:  # pylint: disable=broad-except
      record.update(status="error", error=f"{type(e).__name__}: {e}"[:500],
                    traceback=traceback.format_exc()[-2000:])
    if device.startswith("cuda"):
      torch.cuda.empty_cache()
    emit(record, args.output_jsonl)
  return 0


if __name__ == "__main__":
  sys.exit(main())
