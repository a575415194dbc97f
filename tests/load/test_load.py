"""16 parallel users with conflicting interventions: 0 cross-talk, 0 server errors (short run;
`python -m tests.load.run_load` runs it for 2 minutes)."""
import pytest

from tests.conftest import ARTIFACTS
from tests.helpers.server import serve
from tests.load.fuzz import endpoint_params, status
from tests.load.harness import make_client, run_parallel
from tests.load.scenarios import SCENARIOS, available


@pytest.mark.timeout(1200)
def test_sixteen_clients_see_only_their_own_interventions():
    ARTIFACTS.mkdir(exist_ok=True)
    with serve(env={"WORKBENCH_CHECK_WEIGHTS": "1"}, log_path=ARTIFACTS / "load-server.log") as (url, _):
        client = make_client(url)
        calls = available(SCENARIOS, set(endpoint_params(client)))
        if len(calls) < 2:
            pytest.skip("fewer than two intervention endpoints are served")
        report = run_parallel(url, calls, clients=16, seconds=45, max_requests=160)
        final = status(client)
    print(report.summary())
    assert report.requests >= 16
    assert report.errors == []
    assert report.mismatches == []
    assert final["integrity"] == [] and final["internal_errors"] == 0
