"""Data plumbing the library itself needs: the TFRecord format of cached
features (`tfrecords`)."""
