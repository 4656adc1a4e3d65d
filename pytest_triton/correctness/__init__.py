"""Is it right: test tensors, guard regions, tolerances, comparisons, gradients, determinism,
autotune configs, the compute sanitizer."""
