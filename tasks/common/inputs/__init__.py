"""Reading a task's raw inputs: files, JSON, field checks, bad records."""
