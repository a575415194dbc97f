"""The tabs' methods as MCP tools for agents: `tools` gathers each tab's (components.tab.Tab.tools)
and installs them, `answers` is how a tool answers, `mcp_server` adjusts Gradio's MCP server."""
