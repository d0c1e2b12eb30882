"""The public surface for tool authors: declare free and paid tools on a `ToolSet`.

    from service.tools import ToolSet

    tools = ToolSet()

    @tools.paid("pro", description="...")
    def forecast(city: str) -> str: ...

Name the object in `TOOL_PACKAGES` (`my_package.tools:tools`), or advertise it under the
`paid_mcp.tools` entry point group of an installed package; plans come from the plans file.
"""

from service.paywall.toolset import PaidTool, ToolSet, ToolSpec

__all__ = ["PaidTool", "ToolSet", "ToolSpec"]
