"""What Gradio 6.31's MCP server says about the workbench's tools, adjusted for agents.

`adjust(annotations, extras)` patches Gradio's MCP server class once, before launch:
- each tool carries MCP annotations (read-only or an intervention, its typical cost);
- each parameter's schema states its default, also a falsy one (Gradio drops 0, "" and false), plus
  what components.agents.tools adds (the models a `model` parameter takes);
- an image answer is the image only: Gradio adds an "Image URL" text that names the server's
  temporary folder;
- a file answer (the session report) is a link of its own, FILE_ROUTE/<token>/<name>: Gradio's
  `/gradio_api/file=<path>` link names the server's folders; the token is drawn for the answer and
  the link lasts as long as Gradio keeps the file (its cache, components.serving.exports);
- a request body up to BODY_BYTES is taken on both transports (the `mcp` package refuses 4 MiB
  with HTTP 413, under the 8 MB image a tool documents): a larger image within it gets the tool's
  own clear error, a larger body still an HTTP 413;
- a tool with two outputs (JSON + image) hands them over one by one when the client asks for no
  progress updates (Gradio wrapped them in one more list, so they reached the client as one text).
"""

from __future__ import annotations

import functools
import mimetypes
import re
import secrets
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from backend.core import bounds

FILE_ROUTE = "/gradio_api/agent-file"
MAX_LINKS = 512  # the newest answers' links; an older one answers 404, as a file Gradio dropped does
_LINKS: OrderedDict[str, str] = OrderedDict()  # token -> the file's path in Gradio's cache
_LINKS_LOCK = threading.Lock()
_GRADIO_FILE = re.compile(r"(?:https?://[^\s/]+)?(?:/[^\s]*)?/gradio_api/file=(\S+)")
BODY_BYTES = 32 * 2**20  # an 8 MB image in base64 (≈ 10.7 MB) with room for a clear refusal of larger ones
_STATE: dict[str, dict] = {"annotations": {}, "extras": {}, "ranges": {}}


def adjust(
    annotations: dict[str, dict[str, Any]], extras: dict[str, dict[str, dict]], ranges: dict[str, dict[str, Any]]
) -> None:
    """`ranges`: tool → parameter → its backend.core.bounds.Range, Items (a list's length) or a tuple
    of choices. The schema states them, and a value outside is refused in the tab's words before the
    `mcp` package's own schema check (whose words differ) sees it."""
    from gradio import mcp as gmcp

    _STATE["annotations"], _STATE["ranges"] = annotations, ranges
    _STATE["extras"] = {tool: dict(params) for tool, params in extras.items()}
    for tool, params in ranges.items():
        for name, r in params.items():
            stated = (
                dict(minimum=r.lo, maximum=r.hi)
                if isinstance(r, bounds.Range)
                else dict(maxItems=r.max_items())
                if isinstance(r, bounds.Items)
                else {}  # choices: the schema's enum already lists them
            )
            if stated:
                _STATE["extras"].setdefault(tool, {}).setdefault(name, {}).update(stated)
    cls = gmcp.GradioMCPServer
    if getattr(cls, "_wb_adjusted", False):
        return
    cls._wb_adjusted = True
    cls.StreamableHTTPSessionManager = functools.partial(
        cls.StreamableHTTPSessionManager, max_request_body_size=BODY_BYTES
    )
    cls.SseServerTransport = functools.partial(cls.SseServerTransport, max_request_body_size=BODY_BYTES)

    get_input_schema = cls.get_input_schema

    def schema_with_defaults(self, tool_name, parameters=None):
        schema, filedata = get_input_schema(self, tool_name, parameters)
        info = self.api_info["named_endpoints"].get(self.tool_to_endpoint.get(tool_name, ""), {})
        props = schema.get("properties", {})
        for p in info.get("parameters", []):
            prop = props.get(p["parameter_name"])
            if prop is not None and p.get("parameter_has_default"):
                prop.setdefault("default", p.get("parameter_default"))
        for name, extra in _STATE["extras"].get(tool_name.removeprefix(self.tool_prefix), {}).items():
            if name in props:
                props[name].update(extra)
        return schema, filedata

    cls.get_input_schema = schema_with_defaults

    postprocess = cls.postprocess_output_data

    def without_image_urls(self, data, root_url):
        out = postprocess(self, data, root_url)
        out = [
            c
            for c in out
            if not (
                getattr(c, "type", "") == "text"
                and str(getattr(c, "text", "")).startswith(("Image URL: ", "SVG Image URL: "))
            )
        ]
        for c in out:
            if getattr(c, "type", "") == "text":
                c.text = file_link(str(c.text), root_url)
        return out

    cls.postprocess_output_data = without_image_urls

    mount = cls.launch_mcp_on_sse

    def with_file_route(self, app, subpath, root_path):
        # before Gradio's own routes are added (App.create_app), so none of them shadows it
        app.add_route(FILE_ROUTE + "/{token}/{name}", _serve_link, methods=["GET", "HEAD"])
        return mount(self, app, subpath, root_path)

    cls.launch_mcp_on_sse = with_file_route

    create = cls.create_mcp_server

    def with_annotations(self):
        server = create(self)
        types = self.types
        listed = server.request_handlers[types.ListToolsRequest]

        async def list_tools(req):
            result = await listed(req)
            for tool in result.root.tools:
                a = _STATE["annotations"].get(tool.name.removeprefix(self.tool_prefix))
                if a:
                    tool.annotations = types.ToolAnnotations(**a)
            return result

        server.request_handlers[types.ListToolsRequest] = list_tools
        called = server.request_handlers[types.CallToolRequest]

        async def call_tool(req):
            args = req.params.arguments or {}
            for name, r in _STATE["ranges"].get(req.params.name.removeprefix(self.tool_prefix), {}).items():
                if name not in args:
                    continue
                try:
                    if isinstance(r, bounds.Range):
                        bounds.check(r, args[name], empty=bounds.JSON_NULL)
                    elif isinstance(r, bounds.Items):
                        r.check(args[name], empty=bounds.JSON_NULL)
                    else:
                        bounds.check_choice(name, args[name], r)
                except ValueError as e:
                    return types.ServerResult(
                        types.CallToolResult(content=[types.TextContent(type="text", text=str(e))], isError=True)
                    )
            return await called(req)

        server.request_handlers[types.CallToolRequest] = call_tool
        return server

    cls.create_mcp_server = with_annotations

    from anyio.to_thread import run_sync

    async def _execute_tool_without_progress(self, job):
        result = await run_sync(job.result)
        return list(result) if isinstance(result, tuple) else [result]

    cls._execute_tool_without_progress = _execute_tool_without_progress


def file_link(text: str, root_url: str) -> str:
    """An answer's text that is Gradio's link to a file (`<address>/gradio_api/file=<path>`; a queued
    tool's answer comes back through Gradio's loopback client, so the address may be the server's
    local one) becomes a link on `root_url`, the address the agent called, that names no path; any
    other text stays as it is."""
    found = _GRADIO_FILE.fullmatch(text)
    if not found:
        return text
    path = unquote(found.group(1))
    token = secrets.token_urlsafe(24)
    with _LINKS_LOCK:
        _LINKS[token] = path
        while len(_LINKS) > MAX_LINKS:
            _LINKS.popitem(last=False)
    return f"{root_url}{FILE_ROUTE}/{token}/{quote(Path(path).name)}"


async def _serve_link(request):
    from starlette.responses import FileResponse, PlainTextResponse

    with _LINKS_LOCK:
        path = _LINKS.get(request.path_params.get("token", ""))
    if path is None or not Path(path).is_file():
        return PlainTextResponse("No such file: the link has expired or was never given.", status_code=404)
    # a download, never a page of this origin: a report's HTML carries scripts
    return FileResponse(
        path,
        filename=Path(path).name,
        content_disposition_type="attachment",
        media_type=mimetypes.guess_type(path)[0] or "application/octet-stream",
        headers={"X-Content-Type-Options": "nosniff"},
    )
