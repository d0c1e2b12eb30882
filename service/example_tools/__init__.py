"""The example tool package: free and paid tools that work offline, declared with a `ToolSet`.

It is shaped the way a vendor's own tool package would be: one module-level `tools` object.
"""

from service.example_tools.catalog import tools

__all__ = ["tools"]
