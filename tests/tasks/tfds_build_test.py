"""TensorFlow Datasets' own command builds every builder of the project
(`tfds build`, as a user runs it), on small files in the released formats:
one process for the four builders, each from its folder of a manual dir."""

import json
import os
import subprocess
import sys

import tensorflow_datasets as tfds

import e2e_testing
from hotpotqa_testing import released as hotpot_record
from openkp_testing import make_record
from openkp_testing import vdom_features
from openkp_testing import write_jsonl

# Builder name -> the module that registers it.
BUILDERS = {"wiki_hop": "tasks.wikihop.tfds_dataset",
            "hotpot_qa_distractor": "tasks.hotpotqa.tfds_dataset",
            "open_kp": "tasks.openkp.tfds_dataset",
            "etc_pretrain_text": "tasks.pretrain.tfds_dataset"}


def _write_manual_files(manual):
  """Each builder's released files in manual/<builder name>/."""
  for name in BUILDERS:
    (manual / name).mkdir(parents=True)
  wikihop = [dict(id=f"WH_{i}", query=f"country_of x{i}",
                  candidates=["aland", "bora"], answer="bora",
                  supports=[f"X{i} is in Bora.", "Aland is big."])
             for i in range(2)]
  (manual / "wiki_hop" / "train.json").write_text(json.dumps(wikihop))
  (manual / "wiki_hop" / "dev.json").write_text(json.dumps(wikihop[:1]))
  hotpot = manual / "hotpot_qa_distractor"
  (hotpot / "hotpot_train_v1.1.json").write_text(json.dumps(
      [hotpot_record(i) for i in range(2)]))
  (hotpot / "hotpot_dev_distractor_v1.json").write_text(json.dumps(
      [hotpot_record(0)]))
  openkp = make_record("http://a", [["Zürich", "kp1"], ["b"]], [["kp1"]],
                       [vdom_features(x=1.0), vdom_features(x=2.0)])
  for split in ("Train", "Dev", "EvalPublic"):
    write_jsonl(str(manual / "open_kp" / f"OpenKP{split}.jsonl"), [openkp])
  (manual / "etc_pretrain_text" / "train.txt").write_text(
      "First doc, one.\nFirst doc, two.\n\nSecond doc. Two here.\n")
  (manual / "etc_pretrain_text" / "valid.txt").write_text("Held out.\n")


def test_tfds_build_builds_every_builder(tmp_path):
  manual, data_dir = tmp_path / "manual", tmp_path / "tfds"
  _write_manual_files(manual)
  tfds_command = os.path.join(os.path.dirname(sys.executable), "tfds")
  proc = subprocess.run(
      [tfds_command, "build", *BUILDERS,
       f"--imports={','.join(BUILDERS.values())}",
       f"--manual_dir={manual}", "--add_name_to_manual_dir",
       f"--data_dir={data_dir}"],
      cwd=e2e_testing.REPO, env=dict(e2e_testing.env(),
                                     TF_CPP_MIN_LOG_LEVEL="3"),
      capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  expected = {"wiki_hop": {"train": 2, "validation": 1},
              "hotpot_qa_distractor": {"train": 2, "validation": 1},
              "open_kp": {"train": 1, "validation": 1, "test": 1},
              "etc_pretrain_text": {"train": 2, "validation": 1}}
  for name, splits in expected.items():
    builder = tfds.builder(name, data_dir=str(data_dir))
    assert {s: builder.info.splits[s].num_examples for s in splits} == (
        splits), name
