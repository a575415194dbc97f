"""Serving rules: uploads are size-limited, unknown routes and bad payloads don't crash the server,
and a token in the environment never reaches the logs."""

import urllib.error
import urllib.request
import uuid

import pytest

from tests.conftest import ARTIFACTS
from tests.helpers.server import serve

SECRET = "hf_" + uuid.uuid4().hex  # looks like a hub token


def _post(url: str, body: bytes, ctype: str):
    req = urllib.request.Request(url, data=body, headers={"Content-Type": ctype}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except urllib.error.URLError as e:
        # The server may answer 413 and close while a large body is still being sent.
        if isinstance(e.reason, ConnectionResetError):
            return "reset"
        raise


@pytest.mark.timeout(600)
def test_upload_limit_bad_payloads_and_no_secret_in_logs():
    ARTIFACTS.mkdir(exist_ok=True)
    log = ARTIFACTS / "safety-server.log"
    env = {"HF_TOKEN": SECRET, "HUGGING_FACE_HUB_TOKEN": SECRET}
    with serve(env=env, log_path=log) as (url, proc):
        boundary = "wbboundary"

        def multipart(size: int) -> bytes:
            return (
                (
                    f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="x.png"\r\n'
                    f"Content-Type: image/png\r\n\r\n"
                ).encode()
                + b"\0" * size
                + f"\r\n--{boundary}--\r\n".encode()
            )

        ctype = f"multipart/form-data; boundary={boundary}"
        assert _post(url + "gradio_api/upload", multipart(1024), ctype) == 200
        assert _post(url + "gradio_api/upload", multipart(19 * 2**20), ctype) == 200  # under 20 MB
        assert _post(url + "gradio_api/upload", multipart(25 * 2**20), ctype) in (413, "reset")  # over 20 MB
        for path, body in [
            ("gradio_api/queue/join", b"{not json"),
            ("gradio_api/queue/join", b"{}"),
            ("gradio_api/run/predict", b"\xff\xfe\x00"),
            ("no/such/route", b""),
        ]:
            assert _post(url + path, body, "application/json") in (400, 404, 405, 422)
        from gradio_client import Client

        client = Client(url, verbose=False)
        assert client.predict(api_name="/status")[1]["internal_errors"] == 0
        # Gradio's monitoring summary (every visitor's calls and their times) is not served
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "monitoring/summary", timeout=60)
        assert refused.value.code == 403
        assert proc.poll() is None
    text = log.read_text(errors="replace")
    assert SECRET not in text
