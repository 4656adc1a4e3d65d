"""Triton kernels that ship with pytest-triton: correct everywhere, as fast as the hardware allows,
and gated by the plugin itself (`pytest --pyargs reference_kernels --triton-perf`)."""
