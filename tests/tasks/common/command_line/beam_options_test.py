"""Tests for tasks.common.command_line.beam_options: whether records are
spread, the local workers, and a local run on the FnApiRunner (never Beam's
download of the Prism runner)."""

import os

import pytest

from tasks.common.command_line import beam_options


@pytest.mark.parametrize("args,units,spread", [
    ([], 1, False), (["--runner=DirectRunner"], 1, False),
    (["--direct_num_workers=2"], 1, True),
    (["--direct_num_workers=2"], 2, False),
    (["--direct_num_workers=3"], 2, True),
    (["--runner=FlinkRunner"], 50, True)])
def test_records_spread_only_where_a_local_worker_would_wait(args, units,
                                                             spread):
  # Unspread, the runner fuses reading and featurizing (no records encoded
  # between them); the outputs are the same either way (the in-process and
  # two-worker tests above run both).
  options = beam_options.pipeline_options.PipelineOptions(args)
  assert beam_options.spreads_records(options, units) is spread


def test_local_workers():
  options = beam_options.pipeline_options.PipelineOptions
  assert beam_options.local_workers(options([])) == 1
  assert beam_options.local_workers(options(  # 0: one worker per core
      ["--direct_num_workers=0"])) == os.cpu_count()
  assert beam_options.local_workers(options(["--runner=FlinkRunner"])) is None
  assert beam_options.local_workers(options(["--runner=FnApiRunner"])) == 1


@pytest.mark.parametrize("args,local", [
    ([], True), (["--runner=DirectRunner"], True),
    (["--runner=SwitchingDirectRunner"], True),
    (["--runner=PrismRunner"], False), (["--runner=FlinkRunner"], False),
    (["--runner=FnApiRunner"], False)])
def test_local_runner_is_the_fn_api_runner_with_the_options(args, local):
  from apache_beam.runners.portability.fn_api_runner import fn_runner
  options = beam_options.pipeline_options.PipelineOptions(
      args + ["--direct_num_workers=3"])
  runner = beam_options.local_runner(options)
  if not local:  # the runner `--runner` names
    assert runner is None
    return
  assert isinstance(runner, fn_runner.FnApiRunner)
  # Its worker processes read the options from the provision, as the
  # DirectRunner's own FnApiRunner's do.
  provided = runner._provision_info.provision_info.pipeline_options  # pylint: disable=protected-access
  assert str(provided["beam:option:direct_num_workers:v1"]) == "3"
