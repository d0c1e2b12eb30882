"""The MCP side: the `MCPServer`, its tools, and how a tool learns who is calling."""
