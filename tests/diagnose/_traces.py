"""Trace events shaped as torch.profiler's Chrome trace records them on a GPU (kernel,
gpu_memcpy, cuda_runtime, cuda_driver, cpu_op, [memory]; times in microseconds), for the timed-call
breakdown's controls (test_breakdown.py)."""

from pytest_triton.diagnose import breakdown

ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, "
               "float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, "
               "3ul> >(int, at::native::BinaryFunctor<float, float, float, "
               "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)")
REDUCE = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
          "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
          "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >"
          "(at::native::ReduceOp<float, ...>)")
SPIN = "at::cuda::(anonymous namespace)::spin_kernel(long)"


class Trace:
    """Trace events as torch.profiler exports them (times in microseconds)."""

    def __init__(self):
        self.events = []
        self.corr = 0
        # the spin kernel the breakdown queues first: launched before the range, not the call's
        self.launch(900, 902, SPIN, gpu=(905, 1900))

    def span(self, cat, name, ts, dur, tid=7, pid=1, **args):
        self.events.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid,
                            "pid": pid, "args": args})

    def range(self, ts, end):
        self.span("user_annotation", breakdown.RANGE, ts, end - ts)
        self.span("gpu_user_annotation", breakdown.RANGE, ts + 900, end - ts, tid=7, pid=0)

    def op(self, name, ts, end):
        self.span("cpu_op", name, ts, end - ts)

    def launch(self, ts, end, kernel, gpu, api="cudaLaunchKernel", cat="cuda_runtime",
               kind="kernel", record_api=True):
        self.corr += 1
        if record_api:
            self.span(cat, api, ts, end - ts, correlation=self.corr)
        self.span(kind, kernel, gpu[0], gpu[1] - gpu[0], tid=7, pid=0, correlation=self.corr,
                  stream=7)

    def api(self, name, ts, end):
        self.corr += 1
        self.span("cuda_runtime", name, ts, end - ts, correlation=self.corr)

    def alloc(self, ts, nbytes, device_type=1):
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": ts,
                            "tid": 7, "pid": 1, "args": {"Bytes": nbytes, "Device Type": device_type,
                                                         "Device Id": 0, "Addr": 1234}})


def item_call() -> list[dict]:
    """y = x * 2; s = y.sum().item(); return y * s"""
    t = Trace()
    t.range(1000, 2040)
    t.op("aten::mul", 1000, 1010)
    t.alloc(1001, 4 << 20)
    t.launch(1002, 1006, ELEMENTWISE, gpu=(1900, 1950))
    t.op("aten::sum", 1010, 1020)
    t.launch(1012, 1016, REDUCE, gpu=(1950, 1980))
    t.op("aten::item", 1020, 1992)
    t.op("aten::_local_scalar_dense", 1021, 1991)
    t.launch(1022, 1023, "Memcpy DtoH (Device -> Pageable)", gpu=(1980, 1982),
             api="cudaMemcpyAsync", kind="gpu_memcpy")
    t.api("cudaStreamSynchronize", 1023, 1990)  # the host waits for the spin and both kernels
    t.op("aten::mul", 1995, 2010)
    t.launch(2000, 2008, ELEMENTWISE, gpu=(2030, 2080))  # the GPU waited for the host: 48 us
    return t.events


def clean_call(record_api=True) -> list[dict]:
    """One Triton kernel, launched through the driver API."""
    t = Trace()
    t.range(1000, 1012)
    t.launch(1002, 1008, "_add_kernel", gpu=(1900, 2200), api="cuLaunchKernelEx",
             cat="cuda_driver", record_api=record_api)
    return t.events


def chain_call(malloc=False) -> list[dict]:
    """torch.relu(a + b) * b: three kernels, two temporaries."""
    t = Trace()
    t.range(1000, 1040)
    start = 1900
    for i, (op, kernel) in enumerate((("aten::add", ELEMENTWISE), ("aten::relu", ELEMENTWISE),
                                      ("aten::mul", ELEMENTWISE))):
        t.op(op, 1000 + 12 * i, 1010 + 12 * i)
        t.alloc(1001 + 12 * i, 64 << 20)
        if malloc and i == 0:
            t.api("cudaMalloc", 1001, 1002)
        t.launch(1003 + 12 * i, 1008 + 12 * i, kernel, gpu=(start + 200 * i, start + 200 * (i + 1)))
    return t.events
