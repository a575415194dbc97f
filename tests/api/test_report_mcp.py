"""The MCP tool session_report: an agent's report holds the answers of its own MCP session only."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest

from tests.api.test_exports import storage  # noqa: F401  (fixture: session folders outside the temp folder)
from tests.api.test_mcp import zerogpu_boundary  # noqa: F401  (fixture)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def mcp_url():
    """The app with its MCP tools in this process (as tests/api/test_mcp.py serves it), with this
    module's session storage (`storage`)."""
    from tests.helpers.server import in_process

    with in_process(mcp=True) as url:
        yield url


def _session(url, work, token: str | None = None):
    """One MCP session of an agent that sends `token` as its credentials (Gradio's server is stateless)."""
    import asyncio

    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def run():
        headers = {"Authorization": f"Bearer {token}"} if token else None
        async with streamablehttp_client(url + "gradio_api/mcp/", headers=headers) as (read, write, _):
            async with ClientSession(read, write) as s:
                await s.initialize()
                return await work(s)

    return asyncio.run(run())


def _report(res) -> tuple[dict, str]:
    """The tool's summary and the HTML of the file it wrote (fetched from the app, as a client would)."""
    assert not res.isError, res
    texts = [c.text for c in res.content if c.type == "text"]
    summary = json.loads(texts[0])
    page = ""
    for c in res.content:
        uri = str(getattr(c, "uri", "") or getattr(getattr(c, "resource", None), "uri", "") or "")
        blob = getattr(getattr(c, "resource", None), "text", None)
        found = re.search(r"https?://\S+?\.html", " ".join(texts[1:]) + " " + uri)
        if blob:
            page = blob
        elif found:
            with urllib.request.urlopen(found.group(0), timeout=30) as r:
                page = r.read().decode()
    return summary, page


def test_session_report_holds_this_agents_answers_only(mcp_url):  # noqa: F811
    async def work(s):
        await s.call_tool("pissa_layer", {"layer": "fc2", "rank": 5})
        return await s.call_tool("session_report", {})

    summary, page = _report(_session(mcp_url, work, token="agent-a"))
    assert summary["tabs"] == ["adapters"] and summary["results"] == 1, summary
    assert page and "pissa_layer (MCP tool)" in page and "fc2" in page
    assert "/tmp/" not in page

    # another agent, and one that says who it is by nothing at all: neither sees agent A's answer
    other, other_page = _report(_session(mcp_url, lambda s: s.call_tool("session_report", {}), token="agent-b"))
    assert other["results"] == 0 and other["tabs"] == [] and "pissa_layer" not in other_page, other
    anonymous, _ = _report(_session(mcp_url, work))
    assert anonymous["results"] == 0 and "no session id" in anonymous["note"], anonymous


def test_the_reports_answer_names_no_server_path(mcp_url, storage):  # noqa: F811
    """Gradio's own answer for a file is `<address>/gradio_api/file=/tmp/gradio/…`: a server path. The
    report's link names none, and it still gives the report; so with the session folders anywhere."""
    import tempfile

    from gradio.utils import get_upload_folder

    from backend.core import sessions
    from components.agents.mcp_server import FILE_ROUTE

    async def work(s):
        await s.call_tool("pissa_layer", {"layer": "fc2", "rank": 5})
        return await s.call_tool("session_report", {})

    res = _session(mcp_url, work, token="agent-c")
    answer = json.dumps(res.model_dump(mode="json"))
    for place in (tempfile.gettempdir(), get_upload_folder(), str(sessions.root()), str(storage), "gradio_api/file="):
        assert place not in answer, place
    link = next(c.text for c in res.content if c.type == "text" and FILE_ROUTE in c.text)
    summary, page = _report(res)
    assert summary["results"] == 1 and "pissa_layer (MCP tool)" in page
    with pytest.raises(urllib.error.HTTPError) as gone:  # a made-up link gives nothing
        urllib.request.urlopen(link.replace(link.split("/")[-2], "x" * 32), timeout=30)
    assert gone.value.code == 404


def test_the_report_through_gradio_client_with_session_folders_outside_the_temp_folder(mcp_url, storage):  # noqa: F811
    from gradio_client import Client

    client = Client(mcp_url, verbose=False, download_files=False)
    client.predict("fc2", 5, "pissa", "", api_name="/pissa_layer")
    summary, file = client.predict(api_name="/session_report")
    assert json.loads(summary)["results"] == 1
    with urllib.request.urlopen(file["url"], timeout=30) as r:
        assert "pissa_layer (MCP tool)" in r.read().decode()
    client.close()
