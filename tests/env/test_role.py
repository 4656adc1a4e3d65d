"""The process's role (env/role.py): decided once, the same for every feature that asks."""

import pytest

from pytest_triton.env import role
from pytest_triton.env.role import Role


def test_a_run_of_its_own_is_plain(pytester):
    config = pytester.parseconfig()
    assert role.of(config) is Role.PLAIN
    assert role.is_plain(config) and role.holds_the_session(config)
    assert role.worker_input(config) == {}


def test_a_run_with_triton_child_is_a_child(pytester, tmp_path):
    config = pytester.parseconfig("--triton-child", str(tmp_path))
    assert role.of(config) is Role.CHILD
    assert role.is_child(config) and not role.holds_the_session(config)


def test_a_config_given_workerinput_is_a_worker(pytester):
    config = pytester.parseconfig()
    config.workerinput = {"workerid": "gw3", "workercount": 4}
    assert role.of(config) is Role.WORKER
    assert role.worker_input(config)["workerid"] == "gw3"
    assert not role.holds_the_session(config)


@pytest.mark.requires_plugin("pytest-xdist")
@pytest.mark.parametrize("collect_only", [False, True])
def test_distributing_is_the_controller_unless_it_only_collects(pytester, collect_only):
    args = ["--dist", "load", "--tx", "2*popen"] + (["--collect-only"] if collect_only else [])
    config = pytester.parseconfig(*args)
    assert role.of(config) is (Role.PLAIN if collect_only else Role.CONTROLLER)


def test_decided_once_the_stored_role_stands(pytester):
    config = pytester.parseconfig()
    assert role.decide(config) is Role.PLAIN
    config.workerinput = {"workerid": "gw0"}  # after pytest_configure nothing re-decides it
    assert role.of(config) is Role.PLAIN


@pytest.mark.requires_plugin("pytest-xdist")
def test_under_xdist_the_controller_and_each_worker_know_their_role(pytester):
    pytester.makeconftest("""
        import os
        import pytest
        from pytest_triton.env import role

        @pytest.hookimpl(trylast=True)
        def pytest_configure(config):
            with open(f"role-{os.getpid()}.txt", "w") as f:
                f.write(role.of(config).value)
    """)
    pytester.makepyfile("""
        from pytest_triton.env import role
        def test_a(request):
            assert role.is_worker(request.config)
        def test_b(request):
            assert role.is_worker(request.config)
    """)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    seen = sorted(p.read_text() for p in pytester.path.glob("role-*.txt"))
    assert seen == ["controller", "worker", "worker"]
