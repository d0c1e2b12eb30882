"""The plan catalog, loaded from a TOML file named in settings."""

from __future__ import annotations

import tomllib
from collections.abc import Collection
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from service.money import format_amount, stripe_amount_problem

DEFAULT_PLANS_FILE = Path(__file__).with_name("default_plans.toml")


class PlanCatalogError(Exception):
    """The plans file is missing or invalid; the message names the file and the problem."""


class Plan(BaseModel, frozen=True):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    name: str = Field(min_length=1, max_length=100)
    lookup_key: str = Field(min_length=1, max_length=200)
    amount: int = Field(ge=0, description="integer minor units of the currency (ISO 4217 exponent)")
    currency: str = Field(pattern=r"^[a-z]{3}$")
    interval: Literal["day", "week", "month", "year"]
    tools: tuple[str, ...] = ()

    @field_validator("currency", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _amount_in_iso_minor_units(self) -> Plan:
        problem = stripe_amount_problem(self.amount, self.currency)
        if problem is not None:
            raise ValueError(f"plan {self.id!r}: {problem}")
        return self

    @property
    def price_label(self) -> str:
        """Human price, e.g. '9.00 USD / month'. Display only; money stays in minor units."""
        return f"{format_amount(self.amount, self.currency)} / {self.interval}"


class PlanCatalog:
    def __init__(self, plans: list[Plan]) -> None:
        ids = [plan.id for plan in plans]
        if len(set(ids)) != len(ids):
            raise PlanCatalogError("plan ids must be unique")
        keys = [plan.lookup_key for plan in plans]
        if len(set(keys)) != len(keys):
            raise PlanCatalogError("plan lookup keys must be unique")
        self._plans = {plan.id: plan for plan in plans}
        self._by_lookup_key = {plan.lookup_key: plan for plan in plans}

    @classmethod
    def load(cls, path: Path) -> PlanCatalog:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            return cls([Plan.model_validate(item) for item in data.get("plans", [])])
        except OSError as exc:
            raise PlanCatalogError(f"cannot read plans file {path}: {exc.strerror}") from exc
        except (tomllib.TOMLDecodeError, ValidationError) as exc:
            raise PlanCatalogError(f"invalid plans file {path}: {exc}") from exc

    def all(self) -> list[Plan]:
        return list(self._plans.values())

    def get(self, plan_id: str) -> Plan | None:
        return self._plans.get(plan_id)

    def by_lookup_key(self, lookup_key: str | None) -> Plan | None:
        return self._by_lookup_key.get(lookup_key) if lookup_key else None

    def plans_unlocking(self, tool: str) -> list[Plan]:
        """Cheapest first, so an elicitation offers the least expensive way in."""
        return sorted((plan for plan in self._plans.values() if tool in plan.tools), key=lambda p: p.amount)

    def check_tools(self, paid_tools: dict[str, tuple[str, ...]]) -> None:
        """Every paid tool must name existing plans; a plan listing a tool must see it marked paid."""
        for tool, plan_ids in paid_tools.items():
            for plan_id in plan_ids:
                plan = self.get(plan_id)
                if plan is None:
                    raise PlanCatalogError(f"tool {tool!r} names unknown plan {plan_id!r}")

    def check_plan_tools(self, paid: Collection[str], free: Collection[str]) -> None:
        """Every tool a plan lists must be served and declared paid.

        A listed tool that is free, or that nothing serves, is a start-up error naming it: the
        paywall gates declared paid tools only, so the plan would otherwise sell a tool that is
        served to everyone for nothing (or sell nothing at all).
        """
        problems: list[str] = []
        for plan in self._plans.values():
            for tool in plan.tools:
                if tool in paid:
                    continue
                if tool in free:
                    problems.append(
                        f"plan {plan.id!r} lists tool {tool!r}, which is declared free; mark it paid "
                        "(@tools.paid, or a plan for an upstream tool) or remove it from the plan"
                    )
                else:
                    problems.append(
                        f"plan {plan.id!r} lists tool {tool!r}, which no tool package or upstream serves"
                    )
        if problems:
            raise PlanCatalogError("; ".join(problems))
