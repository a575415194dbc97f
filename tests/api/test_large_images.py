"""A large picture is refused from its header, before anything decodes it, at every image input: the
Relevance image, Features' Analyse and Steer, Memorization's reference image and the MCP tool's
`image_base64`. A 13000×13000 PNG of a few hundred kilobytes once took +3.4 GB of the server's
memory to be refused; now the peak RSS of the serving process grows by at most 300 MB (here: by the
few MB a call costs), and the refusal names the picture's size and the bound."""

import asyncio
import base64
import struct
import zlib

import pytest

from backend.core import bounds

pytestmark = pytest.mark.timeout(300)
SIDE = 13_000
GROWTH_MB = 300  # the most the peak RSS of the serving process may grow before the refusal


def huge_png(path, side: int = SIDE) -> None:
    """A valid 8-bit grayscale PNG of side × side black pixels, written row by row: it decodes to
    side² bytes (169 MB for 13000) but compresses to a few hundred kilobytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    pack = zlib.compressobj(9)
    row = bytes(1 + side)  # filter byte 0, then the row's pixels
    data = b"".join(pack.compress(row) for _ in range(side)) + pack.flush()
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", data)
        + chunk(b"IEND", b"")
    )


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def peak_growth_mb(call) -> tuple[float, Exception | None]:
    """Run `call` (the app serves in this process) and say by how much the process's peak RSS grew
    over its RSS before the call, with what the call raised. Writing 5 to clear_refs resets the peak."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kb("VmRSS")
    raised = None
    try:
        call()
    except Exception as e:  # the refusal, read by the caller
        raised = e
    return (_status_kb("VmHWM") - before) / 1024, raised


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "huge.png"
    huge_png(path)
    assert path.stat().st_size < 1_000_000
    return path


def _refused(raised, name: str = "huge.png") -> str:
    assert raised is not None, "the large picture was taken"
    text = str(raised)
    assert f"{SIDE}×{SIDE} px" in text and f"at most {bounds.IMAGE_SIDE.hi:g} px a side" in text, text
    assert name in text, text
    return text


@pytest.mark.parametrize(
    "api,args",
    [
        ("/explain_image", lambda f: (f, ["mambalrp"], ["ssm", "gate", "norm"])),
        ("/analyse_image", lambda f: (f, None)),
        ("/steer", lambda f: (f, None, 0, 1.0, "prompt", False, False)),
        ("/memo_generate", lambda f: ("a red circle", [], "", 1, f)),
    ],
)
def test_a_large_picture_is_refused_before_it_is_decoded(client, big, api, args):
    from gradio_client import handle_file

    growth, raised = peak_growth_mb(lambda: client.predict(*args(handle_file(str(big))), api_name=api))
    _refused(raised)
    assert growth <= GROWTH_MB, f"{api}: peak RSS +{growth:.0f} MB before the refusal"


def test_a_large_picture_over_mcp_is_refused_before_it_is_decoded(big):
    """`image_base64` of steer_feature: the header is read from the decoded base64, before Pillow
    converts a pixel (the answer was once 'Internal error (DecompressionBombError)')."""
    from components.features.tools import _decode_image

    data = base64.b64encode(big.read_bytes()).decode()
    growth, raised = peak_growth_mb(lambda: _decode_image(data))
    _refused(raised, "image_base64")
    assert growth <= GROWTH_MB, f"image_base64: peak RSS +{growth:.0f} MB before the refusal"


def test_the_mcp_tool_answers_the_refusal(mcp_url, big):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    data = base64.b64encode(big.read_bytes()).decode()

    async def run():
        async with streamablehttp_client(mcp_url + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as s:
                await s.initialize()
                return await s.call_tool("steer_feature", {"feature": 0, "positions": "prompt", "image_base64": data})

    growth, _ = peak_growth_mb(lambda: setattr(run, "answer", asyncio.run(run())))
    answer = run.answer
    assert answer.isError
    _refused(" ".join(c.text for c in answer.content if c.type == "text"), "image_base64")
    assert growth <= GROWTH_MB, f"steer_feature: peak RSS +{growth:.0f} MB before the refusal"
