"""perf_target and interpreter_gap: registration, validation errors, skipping."""

import pytest

from pytest_triton import skip_interpreter_gap


def test_each_bad_marker_errors_its_own_test_and_the_rest_run(pytester):
    # issue 32: one bad marker argument interrupted the whole run (a collection error), even
    # with its test deselected
    pytester.makepyfile(test_k="""
        from pytest_triton import perf_target
        @perf_target(gbps=-1)
        def test_a(triton_bench): pass
        def test_fine(): pass
        @perf_target(max_ms=0)
        def test_b(triton_bench): pass
        @perf_target("sofmax")
        def test_c(triton_bench): pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=3)
    text = result.stdout.str()
    for needle in ("test_k.py::test_a: gbps=-1", "test_k.py::test_b: max_ms=0",
                   "test_k.py::test_c: 'sofmax' is not in the performance checklist"):
        assert needle in text, needle
    deselected = pytester.runpytest("-p", "no:cacheprovider", "-k", "fine")
    deselected.assert_outcomes(passed=1)
    assert deselected.ret == pytest.ExitCode.OK


@pytest.mark.parametrize("marker, wanted", [("perf_targt(gbps=1)", "perf_target"),
                                            ("interpreter_gapp('bf16_dot')", "interpreter_gap"),
                                            ("triton_exclusiv", "triton_exclusive")])
def test_a_misspelt_marker_of_ours_errors_its_test_with_did_you_mean(pytester, marker, wanted):
    pytester.makepyfile(test_k=f"""
        import pytest
        @pytest.mark.{marker}
        def test_a(triton_bench): pass
        @pytest.mark.flaky_network
        def test_b(): pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "-W", "ignore::pytest.PytestUnknownMarkWarning")
    result.assert_outcomes(passed=1, errors=1)  # a name unlike ours is pytest's business
    name = marker.split("(")[0]
    result.stdout.fnmatch_lines([f"*test_k.py::test_a: unknown marker '{name}': did you mean "
                                 f"{wanted}?*--strict-markers*"])


@pytest.mark.parametrize("marker, needle", [
    ("perf_target(bandwidth_fraction=0.8)", "perf_target can't have 'bandwidth_fraction' keyword argument"),
    ("perf_target(bandwith_frac=0.8)", "test_kernel: perf_target can't have 'bandwith_frac' keyword "
                                       "argument; did you mean 'bandwidth_frac'? (expected some of "),
    ("perf_target(tflop_frac=0.5)", "did you mean 'tflops_frac'?"),
    ("perf_target(bandwidth_frac=0)", "bandwidth_frac=0: expected a fraction in (0, 1]"),
    ("perf_target(bandwidth_frac=1.5)", "bandwidth_frac=1.5: expected a fraction in (0, 1]"),
    ("perf_target(tflops_frac=-0.1)", "tflops_frac=-0.1: expected a fraction in (0, 1]"),
    ("perf_target(gbps='fast')", "gbps='fast': expected a number"),
    ("perf_target(speedup=True)", "speedup=True: expected a number"),
    ("perf_target(max_ms=0)", "max_ms=0: expected a number > 0"),
    ("perf_target(max_ms=float('inf'))", "max_ms=inf: expected a number > 0"),
    ("perf_target()", "perf_target needs at least one target"),
    ("perf_target('sofmax')", "'sofmax' is not in the performance checklist; did you mean "
                              "'softmax'?"),
    ("perf_target('softmax', gbps=600)", "gbps is set both by the checklist entry 'softmax'"),
    ("perf_target('softmax', 'matmul')", "takes at most one positional argument"),
    ("perf_target(3)", "must be a checklist name (a string), got 3"),
    ("perf_target(speedup=1, dtype='fp17')", "dtype='fp17': expected one of"),
    ("perf_target(speedup=1, l2='lukewarm')", "l2='lukewarm': expected 'cold' or 'warm'"),
    ("interpreter_gap('bf16')", "interpreter_gap('bf16'): unknown gap"),
    ("interpreter_gap('other')", "interpreter_gap('other') needs reason="),
])
def test_bad_marker_is_a_setup_error_naming_test_and_argument(pytester, marker, needle):
    pytester.makepyfile(f"""
        import pytest
        from pytest_triton import perf_target

        def test_fine(): pass

        @pytest.mark.{marker}
        def test_kernel(triton_bench): pass
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    text = result.stdout.str()
    assert "ERROR at setup of test_kernel" in text
    assert "test_kernel" in text and needle in text, text


def test_perf_target_on_a_test_without_triton_bench_is_a_setup_error(pytester):
    pytester.makepyfile("""
        from pytest_triton import perf_target
        @perf_target(gbps=100)
        def test_kernel(make_tensor): pass
    """)
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_kernel: perf_target(gbps=100.0) on a test that does not use the triton_bench fixture*"])


def test_markers_are_registered_and_strict_markers_is_clean(pytester, run_interpreted):
    pytester.makepyfile("""
        import pytest
        from pytest_triton import perf_target
        @perf_target("vector_add")
        def test_a(triton_bench): triton_bench(lambda: None, bytes=1)
        @pytest.mark.perf_target(speedup=1.0)
        @pytest.mark.parametrize("n", [1, 2])
        def test_b(triton_bench, n): triton_bench(lambda: None, baseline=lambda: None)
        @pytest.mark.interpreter_gap("tensor_descriptor")
        def test_c(): pass
    """)
    result = run_interpreted("--strict-markers", "-rs", "-W", "error::pytest.PytestUnknownMarkWarning")
    result.assert_outcomes(skipped=4)
    result.stdout.fnmatch_lines([
        "*dry run, nothing timed (no GPU): 1 triton_bench call checked and fn run once; targets "
        "unchecked: perf_target('vector_add', bandwidth_frac=0.8, peak='datasheet')*",
        "*interpreter gap: this Triton's interpreter does not support tensor descriptors (TMA)*",
    ])
    markers = pytester.runpytest("--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.perf_target(name=None, *, bandwidth_frac=None,*",
                                  "@pytest.mark.interpreter_gap(gap, *, reason=None)*",
                                  "@pytest.mark.triton_exclusive(scope='test'): under pytest-xdist*"])


def test_perf_without_a_gpu_skips_and_counts_unchecked_targets(pytester, run_interpreted):
    pytester.makepyfile("""
        from pytest_triton import perf_target
        @perf_target(gbps=100)
        def test_a(triton_bench): triton_bench(lambda: None, bytes=1)
        @perf_target("softmax")
        def test_b(triton_bench): triton_bench(lambda: None, bytes=1)
        def test_plain(): pass
    """)
    result = run_interpreted("--triton-perf", "-rs")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines([
        "*2 perf targets UNCHECKED (needs a CUDA GPU): the run FAILS*test_perf_without_a_gpu*",
        "*dry run, nothing timed (no GPU): * targets unchecked: perf_target(gbps=100.0)*",
    ])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_interpreter_gap_with_reason_and_runtime_skip(pytester, run_interpreted):
    pytester.makepyfile("""
        import pytest, torch
        from pytest_triton import skip_interpreter_gap
        @pytest.mark.interpreter_gap("other", reason="needs warp specialization")
        def test_a(): pass
        @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
        def test_b(dtype):
            if dtype == torch.bfloat16:
                skip_interpreter_gap("bf16_dot")
        @pytest.mark.interpreter_gap("other", reason="needs warp specialization")
        def test_c(): pass
        def test_d():
            skip_interpreter_gap("other", reason="needs a cluster launch")
        def test_e():
            skip_interpreter_gap("inline_asm")
    """)
    result = run_interpreted("-rs")
    # bf16_dot is a gap the plugin's interpreter fixes close (env/interpreter/fixes.py): the
    # bf16 case runs; inline_asm stays a gap
    result.assert_outcomes(passed=2, skipped=4)
    # each marked test at its own line (not folded into one line of the plugin's hook)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_interpreter_gap_with_reason_and_runtime_skip.py:3: "
                                 "interpreter gap: needs warp specialization",
                                 "SKIPPED [[]1[]] test_interpreter_gap_with_reason_and_runtime_skip.py:9: "
                                 "interpreter gap: needs warp specialization",
                                 "SKIPPED [[]1[]] test_interpreter_gap_with_reason_and_runtime_skip.py:12: "
                                 "interpreter gap: needs a cluster launch",
                                 "SKIPPED [[]1[]] test_interpreter_gap_with_reason_and_runtime_skip.py:14: "
                                 "interpreter gap: Triton's interpreter cannot run inline assembly"])
    with pytest.raises(ValueError, match=r"skip_interpreter_gap\('other'\) needs reason="):
        skip_interpreter_gap("other")
