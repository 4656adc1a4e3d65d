"""What the user reads: the perf header, table and JSON, the roofline plot, the pytest-benchmark bridge."""
