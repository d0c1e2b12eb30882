"""Declaring tools, free or paid, without touching the server: the surface tool authors use.

    tools = ToolSet()

    @tools.free(description="...")
    def text_stats(text: str) -> TextStats: ...

    @tools.paid("pro", "team", description="...")
    def ascii_chart(values: list[float]) -> str: ...

`install` registers them on an `MCPServer`; each paid tool is wrapped so the paywall runs before
the tool body, in every protocol era. The tool body itself never sees payment concerns.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

if TYPE_CHECKING:  # tool modules import this one; the bench's bare SDK server imports them
    from service.tool_threads import ToolThreads

F = TypeVar("F", bound=Callable[..., Any])
ElicitationStyle = Literal["error", "request"]
_GATE_CONTEXT = "paywall_context"


class PaywallGate(Protocol):
    """What runs a paid tool: `body` when the caller may, else the answer that asks them to pay."""

    async def run(
        self, ctx: Context, tool: PaidTool, arguments: dict[str, Any], body: Callable[[], Awaitable[Any]]
    ) -> Any: ...


@dataclass(frozen=True)
class ToolSpec:
    fn: Callable[..., Any]
    name: str
    description: str | None
    title: str | None


@dataclass(frozen=True)
class PaidTool(ToolSpec):
    plans: tuple[str, ...] = ()
    elicitation: ElicitationStyle | None = None  # None: the service-wide setting


@dataclass
class ToolSet:
    tools: list[ToolSpec] = field(default_factory=list)

    def free(
        self, *, name: str | None = None, description: str | None = None, title: str | None = None
    ) -> Callable[[F], F]:
        def register(fn: F) -> F:
            self.tools.append(ToolSpec(fn, name or fn.__name__, description, title))
            return fn

        return register

    def paid(
        self,
        *plans: str,
        name: str | None = None,
        description: str | None = None,
        title: str | None = None,
        elicitation: ElicitationStyle | None = None,
    ) -> Callable[[F], F]:
        """Mark a tool as paid: callers need a subscription to one of `plans`."""
        if not plans:
            raise ValueError("a paid tool names at least one plan")

        def register(fn: F) -> F:
            self.tools.append(
                PaidTool(fn, name or fn.__name__, description, title, tuple(plans), elicitation)
            )
            return fn

        return register

    @property
    def paid_tools(self) -> dict[str, PaidTool]:
        return {spec.name: spec for spec in self.tools if isinstance(spec, PaidTool)}

    @property
    def free_tool_names(self) -> frozenset[str]:
        return frozenset(spec.name for spec in self.tools if not isinstance(spec, PaidTool))

    def install(self, server: MCPServer, gate: PaywallGate, threads: ToolThreads) -> None:
        """Register every tool on `server`; sync tools run in `threads`, not the SDK's own."""
        for spec in self.tools:
            if isinstance(spec, PaidTool):
                fn = _gated(spec, gate, threads)
            elif inspect.iscoroutinefunction(spec.fn):
                fn = spec.fn
            else:
                fn = _threaded(spec.fn, threads)
            server.add_tool(
                fn, name=spec.name, title=spec.title, description=spec.description or spec.fn.__doc__
            )


def _threaded(fn: Callable[..., Any], threads: ToolThreads) -> Callable[..., Awaitable[Any]]:
    """A sync free tool as a coroutine function with its signature, run in `threads`."""

    @functools.wraps(fn)
    async def wrapper(**kwargs: Any) -> Any:
        return await threads.run_sync(functools.partial(fn, **kwargs))

    signature, hints, parameters = _resolved(fn)
    return _presented(wrapper, signature, parameters, hints.get("return", signature.return_annotation))


def _gated(spec: PaidTool, gate: PaywallGate, threads: ToolThreads) -> Callable[..., Awaitable[Any]]:
    """A wrapper with the tool's own parameters plus a Context, so the SDK builds the same schema."""
    fn = spec.fn
    signature, hints, parameters = _resolved(fn)
    own_context = next((name for name, hint in hints.items() if _is_context(hint)), None)
    context_name = own_context or _GATE_CONTEXT
    if own_context is None:
        parameters.append(
            inspect.Parameter(_GATE_CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=Context)
        )
    is_async = inspect.iscoroutinefunction(fn)

    @functools.wraps(fn)
    async def wrapper(**kwargs: Any) -> Any:
        ctx: Context = kwargs[context_name]
        arguments = {key: value for key, value in kwargs.items() if key != context_name}
        call_kwargs = kwargs if own_context else arguments

        async def body() -> Any:
            if is_async:
                return await fn(**call_kwargs)
            # Like the SDK does for sync tools: keep the event loop free.
            return await threads.run_sync(functools.partial(fn, **call_kwargs))

        return await gate.run(ctx, spec, arguments, body)

    return _presented(wrapper, signature, parameters, hints.get("return", signature.return_annotation))


def _resolved(fn: Callable[..., Any]) -> tuple[inspect.Signature, dict[str, Any], list[inspect.Parameter]]:
    """`fn`'s signature, its type hints resolved in its own module, and its parameters with them."""
    signature = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True)
    parameters = [
        param.replace(annotation=hints.get(param.name, param.annotation))
        for param in signature.parameters.values()
    ]
    return signature, hints, parameters


def _presented(
    wrapper: Callable[..., Awaitable[Any]],
    signature: inspect.Signature,
    parameters: list[inspect.Parameter],
    return_hint: Any,
) -> Callable[..., Awaitable[Any]]:
    """Give `wrapper` these parameters, with annotations resolved in the tool's own module."""
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=parameters, return_annotation=return_hint
    )
    wrapper.__annotations__ = {
        **{param.name: param.annotation for param in parameters},
        "return": return_hint,
    }
    # The SDK must see the wrapper's own signature, not follow __wrapped__ to the tool's.
    del wrapper.__wrapped__  # type: ignore[attr-defined]
    return wrapper


def _is_context(hint: Any) -> bool:
    if inspect.isclass(hint) and issubclass(hint, Context):
        return True
    return any(inspect.isclass(arg) and issubclass(arg, Context) for arg in typing.get_args(hint))
