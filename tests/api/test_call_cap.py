"""The per-call cap (WORKBENCH_CALL_CAP_S) as a Space owner sets it: a request whose estimate is over
it is refused with the estimate and the cap, through the API, before anything is computed."""
import pytest


def test_a_request_over_the_cap_is_refused_with_its_estimate(client, monkeypatch):
    from gradio_client.exceptions import AppError

    from backend.lrp import service as svc

    monkeypatch.setattr(svc.CACHE, "get_or_compute", lambda *a, **k: pytest.fail("computed"))
    monkeypatch.setenv("WORKBENCH_CALL_CAP_S", "5")
    with pytest.raises(AppError) as e:
        client.predict("the movie was great", ["mambalrp", "ig"], ["norm", "silu", "ssm", "gate"], "", True,
                       api_name="/explain_text")
    assert "over this server's per-call cap of 5 s (WORKBENCH_CALL_CAP_S)" in str(e.value)
    assert "estimated at" in str(e.value) and "Nothing was computed" in str(e.value)
