import pytest


@pytest.fixture
def run_interpreted(pytester, monkeypatch):
    """Run pytester in-process with --triton-interpret, on a GPU machine too. The inner run sets
    TRITON_INTERPRET=1 in this process; monkeypatch restores the outer value afterwards."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)

    def run(*args):
        return pytester.runpytest("--triton-interpret", *args)

    return run
