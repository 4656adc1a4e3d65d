"""Where kernels run: device choice, Triton's interpreter, device peaks and NVML, dtypes, seeds, launches."""
