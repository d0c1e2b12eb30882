"""Which plans unlock which paid tool: the decorator's plans and the plans file, together."""

from __future__ import annotations

from service.billing.plans import Plan, PlanCatalog, offer_order
from service.paywall.models import Elicitation
from service.paywall.toolset import PaidTool


class PaidToolIndex:
    def __init__(self, catalog: PlanCatalog, paid_tools: dict[str, PaidTool]) -> None:
        self._catalog = catalog
        self._paid_tools = paid_tools
        # Worked out once: the paywall asks on every paid call.
        self._unlocking = {name: self._compute_unlocking(tool) for name, tool in paid_tools.items()}
        self._unlocking_ids = {
            name: frozenset(plan.id for plan in plans) for name, plans in self._unlocking.items()
        }

    @property
    def catalog(self) -> PlanCatalog:
        return self._catalog

    def _compute_unlocking(self, tool: PaidTool) -> list[Plan]:
        named = [plan for plan_id in tool.plans if (plan := self._catalog.get(plan_id)) is not None]
        listed = self._catalog.plans_unlocking(tool.name)
        unique = {plan.id: plan for plan in [*named, *listed]}
        return sorted(unique.values(), key=offer_order)

    def unlocking_plans(self, tool: PaidTool) -> list[Plan]:
        """Plans named by the tool's decorator or listing the tool in the plans file, cheapest first."""
        cached = self._unlocking.get(tool.name)
        return cached if cached is not None else self._compute_unlocking(tool)

    def plans_for(self, tool_name: str) -> list[Plan]:
        """`unlocking_plans` by the tool's name; none for a tool that is not paid (any more)."""
        return list(self._unlocking.get(tool_name, []))

    def unlocking_plan_ids(self, tool: PaidTool) -> frozenset[str]:
        """The ids of `unlocking_plans(tool)`."""
        cached = self._unlocking_ids.get(tool.name)
        if cached is not None:
            return cached
        return frozenset(plan.id for plan in self._compute_unlocking(tool))

    def satisfied_by(self, elicitation: Elicitation, entitled_plan_ids: frozenset[str]) -> bool:
        """Whether the user's plans now unlock the tool this elicitation was opened for."""
        tool = self._paid_tools.get(elicitation.tool_name)
        unlocking = self.unlocking_plan_ids(tool) if tool else frozenset()
        return not entitled_plan_ids.isdisjoint(unlocking | {elicitation.plan_id})
