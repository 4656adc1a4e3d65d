"""Is it fast enough: perf targets, the checklist, timing, statistics, verdicts, calibration,
the perf session."""
