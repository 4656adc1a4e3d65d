"""Why it is slow: the explain diagnosis, Nsight Compute, the torch profiler trace."""
