"""The launch-error check asks every CUDA runtime the process loaded (judge/launcherrors.py), on
stand-in runtimes: each keeps its own last error, and a CUDA extension may bring one beside
torch's."""

from pytest_triton.judge import launcherrors


class _Fn:
    """A stand-in C function: callable, and takes ctypes' restype and argtypes."""

    def __init__(self, call):
        self.call = call

    def __call__(self, *args):
        return self.call(*args)


class _Runtime:
    """A stand-in libcudart: its last error, read and cleared by cudaGetLastError."""

    def __init__(self, handle, code=0):
        self._handle, self.code, self.reads = handle, code, 0
        self.cudaGetLastError = _Fn(self._last)
        self.cudaGetErrorString = _Fn(
            {2: b"out of memory", 9: b"invalid configuration argument"}.__getitem__)

    def _last(self):
        self.reads += 1
        code, self.code = self.code, 0
        return code


def test_every_loaded_runtime_is_asked_once_and_an_extensions_error_is_named(monkeypatch):
    torch_rt, extension_rt = _Runtime(1), _Runtime(2, code=9)
    libs = {"libcudart.so.12": torch_rt, "/site/torch/lib/libcudart-abc.so.12": torch_rt,
            "/site/ext/libcudart.so.13": extension_rt}
    monkeypatch.setattr(launcherrors, "_OPENED", {})
    monkeypatch.setattr(launcherrors, "_loaded_runtimes", lambda: [p for p in libs if "/" in p])
    monkeypatch.setattr(launcherrors.ctypes, "CDLL",
                        lambda name, mode=0: libs[name] if name in libs else (_ for _ in ()).throw(
                            OSError(name)))
    found = launcherrors.runtimes()
    assert found == [torch_rt, extension_rt]  # torch's, named twice, once
    assert launcherrors.read(found) == "invalid configuration argument (cudaError 9)"
    assert (torch_rt.reads, extension_rt.reads) == (1, 1)
    assert launcherrors.read(found) is None  # read once, cleared


def test_without_a_runtime_nothing_is_read(monkeypatch):
    monkeypatch.setattr(launcherrors, "_OPENED", {})
    monkeypatch.setattr(launcherrors, "_loaded_runtimes", lambda: [])

    def missing(name, mode=0):
        raise OSError(name)

    monkeypatch.setattr(launcherrors.ctypes, "CDLL", missing)
    assert launcherrors.runtimes() == [] and launcherrors.read([]) is None
