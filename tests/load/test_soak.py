"""Soak (CI-sized): mixed requests; memory growth after warm-up ≤ 10 %, caches within budget."""

import pytest

from tests.conftest import ARTIFACTS
from tests.helpers.server import serve
from tests.load.fuzz import endpoint_params
from tests.load.scenarios import SOAK, available
from tests.load.harness import make_client
from tests.load.soak import soak


@pytest.mark.timeout(1500)
def test_soak_memory_flat_and_caches_bounded():
    ARTIFACTS.mkdir(exist_ok=True)
    with serve(log_path=ARTIFACTS / "soak-server.log") as (url, proc):
        calls = available(SOAK, set(endpoint_params(make_client(url))))
        rep = soak(url, proc.pid, calls, requests=150, warmup=60)
    print(rep.summary())
    assert rep.errors == []
    assert rep.caches_over_budget == []
    assert rep.growth <= 0.10, rep.summary()
