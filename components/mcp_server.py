"""What Gradio 6.31's MCP server says about the workbench's tools, adjusted for agents.

`adjust(annotations, extras)` patches Gradio's MCP server class once, before launch:
- each tool carries MCP annotations (read-only or an intervention, its typical cost);
- each parameter's schema states its default, also a falsy one (Gradio drops 0, "" and false), plus
  what components.agent_tools adds (the models a `model` parameter takes);
- an image answer is the image only: Gradio adds an "Image URL" text that names the server's
  temporary folder;
- a request body up to BODY_BYTES is taken on both transports (the `mcp` package refuses 4 MiB
  with HTTP 413, under the 8 MB image a tool documents): a larger image within it gets the tool's
  own clear error, a larger body still an HTTP 413;
- a tool with two outputs (JSON + image) hands them over one by one when the client asks for no
  progress updates (Gradio wrapped them in one more list, so they reached the client as one text).
"""
from __future__ import annotations

import functools
from typing import Any

from backend.core import bounds

BODY_BYTES = 32 * 2**20  # an 8 MB image in base64 (≈ 10.7 MB) with room for a clear refusal of larger ones
_STATE: dict[str, dict] = {"annotations": {}, "extras": {}, "ranges": {}}


def adjust(annotations: dict[str, dict[str, Any]], extras: dict[str, dict[str, dict]],
           ranges: dict[str, dict[str, Any]]) -> None:
    """`ranges`: tool → parameter → its backend.core.bounds.Range (or a tuple of choices). The schema
    states them, and a value outside is refused in the tab's words before the `mcp` package's own
    schema check (whose words differ) sees it."""
    from gradio import mcp as gmcp

    _STATE["annotations"], _STATE["ranges"] = annotations, ranges
    _STATE["extras"] = {tool: dict(params) for tool, params in extras.items()}
    for tool, params in ranges.items():
        for name, r in params.items():
            if isinstance(r, bounds.Range):
                extra = _STATE["extras"].setdefault(tool, {}).setdefault(name, {})
                extra.update(minimum=r.lo, maximum=r.hi)
    cls = gmcp.GradioMCPServer
    if getattr(cls, "_wb_adjusted", False):
        return
    cls._wb_adjusted = True
    cls.StreamableHTTPSessionManager = functools.partial(cls.StreamableHTTPSessionManager,
                                                        max_request_body_size=BODY_BYTES)
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
        return [c for c in out if not (getattr(c, "type", "") == "text" and
                                       str(getattr(c, "text", "")).startswith(("Image URL: ", "SVG Image URL: ")))]

    cls.postprocess_output_data = without_image_urls

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
                        bounds.check(r, args[name])
                    else:
                        bounds.check_choice(name, args[name], r)
                except ValueError as e:
                    return types.ServerResult(types.CallToolResult(
                        content=[types.TextContent(type="text", text=str(e))], isError=True))
            return await called(req)

        server.request_handlers[types.CallToolRequest] = call_tool
        return server

    cls.create_mcp_server = with_annotations

    from anyio.to_thread import run_sync

    async def _execute_tool_without_progress(self, job):
        result = await run_sync(job.result)
        return list(result) if isinstance(result, tuple) else [result]

    cls._execute_tool_without_progress = _execute_tool_without_progress
