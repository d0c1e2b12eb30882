"""Puts ../stripe_sandbox into the built wheel; an editable install only points sys.path at it."""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class SandboxPackage(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "standard":
            build_data["force_include"]["../stripe_sandbox"] = "stripe_sandbox"
