"""WikiHop (qangaroo): reading, featurization, synthetic demo data, TFDS."""
