"""Raw HTTP requests to the API that Gradio 6.31 answered badly (issue 51, item 7): an empty
session_hash (HTTP 500), a wrong number of arguments (`{"error": null}`), a body of any size (a
60 MB JSON body read and parsed whole, +133 MB). components.gradio_fixes.patches has the fixes; each is
checked here against the served app, over plain HTTP as any client would send it."""

import json
import select
import socket
import time
from urllib.parse import urlparse

import httpx
import pytest

pytestmark = pytest.mark.timeout(180)


def _fn_index(app_url: str, api_name: str) -> int:
    deps = httpx.get(app_url + "config", timeout=30).json()["dependencies"]
    return next(d["id"] for d in deps if d.get("api_name") == api_name)


def _answer(app_url: str, api_name: str, event_id: str) -> str:
    return httpx.get(app_url + f"gradio_api/call/{api_name}/{event_id}", timeout=120).text


def test_an_empty_session_hash_is_no_session_on_call_and_refused_on_join(app_url):
    """`"session_hash": ""` raised a KeyError in Gradio's queue (HTTP 500). On /call it is now taken
    as no hash, as a request without one is; on /queue/join, whose caller listens by that hash, it is
    refused with HTTP 400 and why."""
    r = httpx.post(app_url + "gradio_api/call/status", json={"data": [], "session_hash": ""}, timeout=30)
    assert r.status_code == 200, r.text
    assert "event: complete" in _answer(app_url, "status", r.json()["event_id"])
    r = httpx.post(
        app_url + "gradio_api/queue/join",
        timeout=30,
        json={"data": [], "fn_index": _fn_index(app_url, "status"), "session_hash": ""},
    )
    assert r.status_code == 400, r.text
    assert r.json()["detail"].startswith("session_hash is empty.")


EXPLAIN = ["Text", "Methods", "MambaLRP rules (untick to ablate)"]


@pytest.mark.parametrize("data", [[], ["hello"], ["hello", ["gi"], ["norm"], "", False, "", "extra"]])
def test_a_wrong_number_of_arguments_says_how_many_the_endpoint_takes(app_url, data):
    """A /call with too few arguments answered `{"error": null}` from the queue, one with too many
    had the extra ones dropped silently: now HTTP 400 before anything is queued, naming the count."""
    r = httpx.post(app_url + "gradio_api/call/explain_text", json={"data": data}, timeout=30)
    assert r.status_code == 400, r.text
    detail = r.json()["detail"]
    assert detail.startswith("/explain_text takes 6 arguments (" + ", ".join(EXPLAIN)), detail
    assert detail.endswith(f"this request sent {len(data)}. Nothing was run."), detail
    if len(data) < 6:  # /run reaches the handler's input check: the same words, not `{"error": null}`
        r = httpx.post(app_url + "gradio_api/run/explain_text", json={"data": data}, timeout=30)
        assert r.json()["error"] == detail, r.text


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _raw_post(app_url: str, path: str, headers: list[str], chunks, timeout: float = 20.0) -> tuple[int, str, int]:
    """POST over a plain socket, sending `chunks` until the server answers; (status, body, bytes sent).
    A server that reads the whole body first answers only after the last chunk (or never, when the
    declared length is not all sent: then the status is 0)."""
    u = urlparse(app_url)
    sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
    sent = 0
    try:
        sock.sendall(
            (
                f"POST {path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\n"
                + "".join(h + "\r\n" for h in headers)
                + "\r\n"
            ).encode()
        )
        for chunk in chunks:
            if select.select([sock], [], [], 0)[0]:
                break  # the server has answered
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        raw, deadline = b"", time.monotonic() + timeout
        while time.monotonic() < deadline and b"\r\n\r\n" not in raw:
            if select.select([sock], [], [], 0.5)[0]:
                part = sock.recv(65536)
                if not part:
                    break
                raw += part
        if b"\r\n\r\n" not in raw:
            return 0, "", sent
        head, body = raw.split(b"\r\n\r\n", 1)
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
            None,
        )
        while length is not None and len(body) < length and select.select([sock], [], [], 2)[0]:
            part = sock.recv(65536)
            if not part:
                break
            body += part
        return int(head.split(b" ")[1]), body.decode(errors="replace"), sent
    finally:
        sock.close()


def test_a_body_over_the_limit_is_refused_before_it_is_read(app_url):
    """A 60 MB JSON body to /gradio_api/call/<name> was read and parsed whole (+133 MB). Now one that
    declares its length is refused with HTTP 413 and why after its first megabyte (the server does
    not wait for the rest), and a chunked one as soon as its bytes pass the limit; the serving
    process (this one) grows by little more than the limit's worth of bytes at most."""
    from components.gradio_fixes.patches import REQUEST_BODY_BYTES

    size, mb = 60 * 2**20, b"a" * 2**20
    head = b'{"data": ["'
    tail = b'", ["gi"], ["norm"], "", false, ""]}'
    path = "/gradio_api/call/explain_text"

    def body(n_mb: int):
        yield head
        for _ in range(n_mb):
            yield mb
        yield tail

    declared = size + len(head) + len(tail)
    status, text, sent = _raw_post(
        app_url, path, ["Content-Type: application/json", f"Content-Length: {declared}"], body(1)
    )
    assert status == 413, f"no refusal before the body was sent whole ({status}, {text[:200]!r})"
    assert json.loads(text)["detail"].startswith(
        f"This request's body is 62.9 MB, over this server's limit of {REQUEST_BODY_BYTES / 1e6:.1f} MB"
    ), text

    def chunked(n_mb: int):
        for piece in body(n_mb):
            yield b"%x\r\n%s\r\n" % (len(piece), piece)
        yield b"0\r\n\r\n"

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kb("VmRSS")
    status, text, sent = _raw_post(
        app_url, path, ["Content-Type: application/json", "Transfer-Encoding: chunked"], chunked(60)
    )
    growth_mb = (_status_kb("VmHWM") - before) / 1024
    print(f"a chunked body refused after {sent / 2**20:.0f} MiB sent; peak RSS +{growth_mb:.0f} MB; {text}")
    assert status == 413, (status, text[:200])
    assert json.loads(text)["detail"].startswith("This request's body went past this server's limit"), text
    assert sent < size, "the whole body was sent before the refusal"
    assert growth_mb < REQUEST_BODY_BYTES / 2**20 + 40, growth_mb
    # a call within the limit is served as before
    r = httpx.post(app_url + "gradio_api/call/status", json={"data": []}, timeout=30)
    assert r.status_code == 200 and "event: complete" in _answer(app_url, "status", r.json()["event_id"])
