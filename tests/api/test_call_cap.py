"""The per-call cap (WORKBENCH_CALL_CAP_S) as a Space owner sets it: a request whose estimate, from
the times this server measured for the same computation, reaches it is refused with the estimate and
the cap, through the API, before anything is computed; a quick one is never refused."""
import re
import time

import pytest


def test_a_request_measured_over_the_cap_is_refused_with_its_estimate(client, monkeypatch):
    from gradio_client.exceptions import AppError

    from backend.lrp import service as svc

    args = ("the movie was great", ["gi"], ["norm", "silu", "ssm", "gate"], "", True)
    monkeypatch.setenv("WORKBENCH_CALL_CAP_S", "2")
    client.predict(*args, api_name="/explain_text")  # quick: runs although its ZeroGPU allowance is 10 s
    client.predict(*args, api_name="/explain_text")
    real, ran = svc.CACHE.get_or_compute, []

    def slow(*a, **k):  # the same computation, now slow (a loaded machine)
        ran.append(1)
        time.sleep(2.5)
        return real(*a, **k)

    monkeypatch.setattr(svc.CACHE, "get_or_compute", slow)
    client.predict(*args, api_name="/explain_text")  # measured quick before: runs, 2.5 s
    with pytest.raises(AppError) as e:
        client.predict(*args, api_name="/explain_text")
    assert "over this server's per-call cap of 2 s (WORKBENCH_CALL_CAP_S)" in str(e.value)
    assert re.search(r"estimated at \d+ s from the times measured on this server", str(e.value))
    assert "Nothing was computed" in str(e.value) and ran == [1]
