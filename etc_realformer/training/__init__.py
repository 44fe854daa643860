"""Training spine shared by all tasks: optimizer, strategy, precision,
checkpoint initialisation, the orbit-based train/eval loop, experiment modes."""
