"""What the task binaries share on the command line: flags, options, checks."""
