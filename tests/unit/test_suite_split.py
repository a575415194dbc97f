"""The suite's own set-up (tests/conftest.py): how two processes split it, their folders, one TLS context."""

import os
import subprocess
import sys

from tests.conftest import ROOT, _unit


def test_folders_that_share_a_server_are_one_unit_and_other_files_their_own():
    assert _unit("tests/e2e/test_tour.py::test_every_tour_start_to_end") == "e2e"
    assert _unit("tests/api/test_mcp.py::test_x[a]") == _unit("tests/api/test_tour.py::test_y") == "api"
    assert _unit("tests/hub/test_hub_app.py::test_z[forked]") == "hub"
    assert (
        _unit("tests/unit/test_lrp.py::test_a") == _unit("tests/unit/test_lrp.py::test_b") == "tests/unit/test_lrp.py"
    )
    assert _unit("tests/load/test_soak.py::test_s") == "tests/load/test_soak.py"
    assert _unit("tests/test_network.py::test_n") == "tests/test_network.py"


def _folders(env: dict) -> str:
    code = "import os, tests.conftest; print(os.environ['HF_HOME'], os.environ['WORKBENCH_SESSION_DIR'])"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout.split()


def test_an_xdist_worker_makes_its_own_folders_and_keeps_a_users():
    made = {
        "HF_HOME": "/tmp/controller-hf",
        "WORKBENCH_SESSION_DIR": "/tmp/controller-sessions",
        "WORKBENCH_TESTS_MADE_HF_HOME": "/tmp/controller-hf",
        "WORKBENCH_TESTS_MADE_WORKBENCH_SESSION_DIR": "/tmp/controller-sessions",
    }
    worker = _folders({**os.environ, **made, "PYTEST_XDIST_WORKER": "gw1"})
    assert worker[0] != "/tmp/controller-hf" and worker[1] != "/tmp/controller-sessions"
    assert all(os.path.basename(p).startswith("wb-test-") for p in worker)
    # a folder the user set (not one a test process made) is kept, in a worker too
    users = {**os.environ, "HF_HOME": "/tmp/users-hf", "PYTEST_XDIST_WORKER": "gw1"}
    users.pop("WORKBENCH_TESTS_MADE_HF_HOME", None)
    assert _folders(users)[0] == "/tmp/users-hf"


def test_test_clients_share_one_tls_context():
    import httpx

    with httpx.Client() as a, httpx.Client() as b:
        assert a._transport._pool._ssl_context is b._transport._pool._ssl_context
    with httpx.Client(verify=False) as c:
        assert c._transport._pool._ssl_context is not a._transport._pool._ssl_context
