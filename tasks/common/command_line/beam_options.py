"""Beam's pipeline options from a binary's arguments, and the runner choice.

- `pipeline_options_from`: the arguments absl did not take, parsed as Beam's
  options; an unknown one or a bad value is one line;
- `local_runner`: the FnApiRunner for a local DirectRunner run (never the
  Prism binary a download would bring);
- `local_workers` / `spreads_records`: how many local workers, and whether
  the records are reshuffled between reading and featurizing.
"""

import contextlib
import difflib
import logging as std_logging
import os
from typing import Optional, Sequence

from etc_realformer.errors import UserInputError

with contextlib.ExitStack() as _quiet:
  # Beam's import warns about cloud clients it does not need here (one line
  # each on stderr, where a binary's errors must be one line).
  std_logging.disable(std_logging.WARNING)
  _quiet.callback(std_logging.disable, std_logging.NOTSET)
  from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top
  from apache_beam.runners import runner as beam_runner  # pylint: disable=g-import-not-at-top


# What `--runner` names the local DirectRunner (none given is the same).
_DIRECT_RUNNERS = (None, "DirectRunner", "direct", "SwitchingDirectRunner")
_LOCAL_RUNNERS = _DIRECT_RUNNERS + ("BundleBasedDirectRunner", "FnApiRunner")


def local_runner(options: pipeline_options.PipelineOptions
                 ) -> Optional[beam_runner.PipelineRunner]:
  """The runner a local DirectRunner run uses: Beam's FnApiRunner, with the
  pipeline options handed to its workers as the DirectRunner hands them;
  None (the runner `--runner` names) for any other runner.

  Beam's DirectRunner picks one at run time: the Prism runner (a Go binary
  it downloads from GitHub on first use) when the network allows, else the
  FnApiRunner. The outputs, the worker modes and the throughput in
  docs/preprocessing.md are the FnApiRunner's, and a run should neither
  depend on the network nor hang on a blocked download, so that choice is
  made here. `--runner=PrismRunner` still asks for Prism.
  """
  runner = options.view_as(pipeline_options.StandardOptions).runner
  if runner not in _DIRECT_RUNNERS:
    return None
  # The same provision as DirectRunner.run_pipeline's FnApiRunner: the
  # worker processes read the pipeline options from it.
  from apache_beam.portability.api import beam_provision_api_pb2  # pylint: disable=g-import-not-at-top
  from apache_beam.runners.portability import portable_runner  # pylint: disable=g-import-not-at-top
  from apache_beam.runners.portability.fn_api_runner import fn_runner  # pylint: disable=g-import-not-at-top
  encoded = portable_runner.JobServiceHandle.encode_pipeline_options(
      options.get_all_options())
  return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
      beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def local_workers(options: pipeline_options.PipelineOptions
                  ) -> Optional[int]:
  """The DirectRunner's workers (1 by default: in this process; 0 asks for
  one per core); None on any other runner."""
  runner = options.view_as(pipeline_options.StandardOptions).runner
  if runner not in _LOCAL_RUNNERS:
    return None
  workers = options.view_as(pipeline_options.DirectOptions).direct_num_workers
  return workers or os.cpu_count() or 1


def spreads_records(options: pipeline_options.PipelineOptions,
                    num_units: int) -> bool:
  """Whether the records are reshuffled between reading and featurizing.

  On the local DirectRunner, only when there are fewer read units (files)
  than workers: otherwise every worker reads and featurizes units of its
  own, and reshuffling would only add the encoding of every record (NQ,
  2 files on 2 workers: 21.6 against 31.1 pages/s, docs/preprocessing.md).
  On any other runner, always: its workers are many, and come and go.
  """
  workers = local_workers(options)
  return workers is None or num_units < workers


# ---------------------------------------------------------------- options
class _OptionParser(pipeline_options._BeamArgumentParser):  # pylint: disable=protected-access
  """Beam's option parser, whose errors are one line (not argparse's usage
  text and exit)."""

  def error(self, message):
    raise UserInputError(f"pipeline option: {message}")


def pipeline_options_from(args: Sequence[str]
                          ) -> pipeline_options.PipelineOptions:
  """Beam's `PipelineOptions` of the arguments absl did not take.

  Raises:
    UserInputError: an argument no Beam option knows (a typo: Beam itself
      would only warn), a bad value, or an unknown runner.
  """
  parser = _OptionParser(allow_abbrev=False)
  seen = set()
  for cls in pipeline_options.PipelineOptions.__subclasses__():
    if str(cls) not in seen:
      seen.add(str(cls))
      cls._add_argparse_args(parser)  # pylint: disable=protected-access
  known, unknown = parser.parse_known_args(list(args))
  if unknown:
    known_names = [o for a in parser._actions for o in a.option_strings]  # pylint: disable=protected-access
    name = unknown[0].split("=", 1)[0]
    guess = difflib.get_close_matches(name, known_names, 1)
    raise UserInputError(
        f"unknown option {unknown[0]!r}" +
        (f" (did you mean {guess[0]}?)" if guess else
         " (neither a flag of this binary nor a Beam pipeline option)"))
  if known.runner:
    try:
      beam_runner.create_runner(known.runner)
    except (ValueError, ImportError) as e:
      raise UserInputError(f"--runner={known.runner}: {e}") from e
  args = list(args)
  if known.default_sdk_harness_log_level is None:
    # Worker processes would log every start and stop on the binary's stderr.
    args.append("--default_sdk_harness_log_level=ERROR")
  return pipeline_options.PipelineOptions(args)
