"""The regression gate, in one place: the saved runs (storage, their schema and its upgrades,
shards merged), the statistics of a change between two runs, the gate a pytest run registers,
the renderers of a comparison and of a trend, and the `python -m pytest_triton` commands.
Nothing here imports torch or Triton: the command line runs where neither is installed."""
