"""The app opens no non-loopback connection while launching and serving a request."""

import json
import sys

from tests.conftest import ARTIFACTS, ROOT
from tests.helpers.audit_launch import is_loopback
from tests.helpers.server import serve


def test_launch_and_one_request_stay_on_loopback(tmp_path):
    log = tmp_path / "net.jsonl"
    launcher = [sys.executable, str(ROOT / "tests" / "helpers" / "audit_launch.py"), str(log)]
    ARTIFACTS.mkdir(exist_ok=True)
    with serve(python=launcher, log_path=ARTIFACTS / "network-server.log") as (url, _):
        from gradio_client import Client

        assert Client(url, verbose=False).predict(api_name="/status")[1]["preset_source"] == "zoo"
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    (ARTIFACTS / "network-events.jsonl").write_text(log.read_text())
    assert events, "the audit hook saw no socket use at all (Gradio checks its own port at launch)"
    outside = []
    for e in events:
        if e["event"] == "connect" and isinstance(e["addr"], list) and not is_loopback(e["addr"][0]):
            outside.append(e)
        if e["event"] == "getaddrinfo" and not is_loopback(e["host"]):
            outside.append(e)
    assert outside == [], f"non-loopback network use: {outside[:5]}"


def test_audit_hook_would_catch_an_outside_address():
    assert not is_loopback("huggingface.co") and not is_loopback("8.8.8.8")
    assert not is_loopback("10.0.0.1")
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
