"""What survives a crash: GPU faults, supervised child processes, xdist workers, the GPU lock."""
