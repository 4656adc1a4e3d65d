"""What the plugin prints: the header (and, with --triton-perf, the summary table)."""

from __future__ import annotations

import pytest

from . import state


def _versions() -> str:
    import torch
    import triton

    return f"torch {torch.__version__}, triton {triton.__version__}"


def header(config: pytest.Config) -> list[str]:
    st = state.get(config)
    rt = st.runtime
    if rt.interpret:
        where = f"cpu under Triton's interpreter ({rt.why})"
    else:
        import torch

        where = f"{rt.device} = {torch.cuda.get_device_name(rt.device)} ({rt.why})"
    perf = "on" if st.perf else "off (perf_target tests skip; --triton-perf times them)"
    return [f"pytest-triton: {where}; {_versions()}",
            f"pytest-triton: seed base {st.base_seed} (--triton-seed); perf {perf}"]
