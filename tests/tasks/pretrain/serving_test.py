"""Pre-training's serving signatures as the export README documents them:
names, inputs and outputs with their dtypes and shapes, core ops only."""

from etc_realformer.export import ops
import pretrain_testing
import serving_testing


def test_readme_documents_the_signatures_and_their_ops():
  task = pretrain_testing.tiny_task()
  model = task.build_model()
  model(task.dummy_features(), training=False)
  signatures = task.serving_signatures(model)
  masking = task.masking
  serving_testing.assert_readme_documents(
      "Pre-training", serving_testing.function_specs(signatures),
      {"L": pretrain_testing.LONG, "G": pretrain_testing.GLOBAL,
       "P": masking.max_predictions_per_seq, "C": masking.max_cpc_sentences,
       "S": masking.cpc_max_sentence_len})
  assert serving_testing.readme_ops("Pre-training") == ((), ())
  for name, function in signatures.items():
    assert not ops.not_in_core(ops.function_op_types(function)), name
