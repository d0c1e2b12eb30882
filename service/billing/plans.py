"""The catalog, loaded from a TOML file named in settings: subscription plans (optionally with
included calls per period and what happens past them), per-tool metered prices billed through
Stripe Billing Meters, and prepaid credit packs bought once through Checkout in payment mode."""

from __future__ import annotations

import tomllib
from collections.abc import Collection
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from service.money import format_amount, stripe_amount_problem
from service.settings.checks import DEFAULT_PLANS_FILE as DEFAULT_PLANS_FILE  # where callers look for it


class PlanCatalogError(Exception):
    """The plans file is missing or invalid; the message names the file and the problem."""


Interval = Literal["day", "week", "month", "year"]
Overage = Literal["block", "meter"]
# Stripe's largest unit amount, in minor units; a larger figure in the file is a typo.
MAX_UNIT_AMOUNT = 99_999_999
MAX_INCLUDED_CALLS = 1_000_000_000
MAX_PACK_CREDITS = 1_000_000
_ID = r"^[a-z0-9][a-z0-9_-]{0,63}$"
_TOOL = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


def _checked_amount(owner: str, amount: int, currency: str) -> None:
    problem = stripe_amount_problem(amount, currency)
    if problem is not None:
        raise ValueError(f"{owner}: {problem}")


class Plan(BaseModel, frozen=True, extra="forbid"):
    id: str = Field(pattern=_ID)
    name: str = Field(min_length=1, max_length=100)
    lookup_key: str = Field(min_length=1, max_length=200)
    amount: int = Field(
        ge=0, le=MAX_UNIT_AMOUNT, description="integer minor units of the currency (ISO 4217 exponent)"
    )
    currency: str = Field(pattern=r"^[a-z]{3}$")
    interval: Interval
    tools: tuple[str, ...] = ()
    # Calls of the plan's tools included each billing period; None: unlimited.
    included_calls: int | None = Field(default=None, ge=0, le=MAX_INCLUDED_CALLS)
    # Past the included calls: `block` asks the user to upgrade or buy credits, `meter` bills each
    # further call through the tool's metered price on the period-end invoice.
    overage: Overage | None = None

    _lower_currency = field_validator("currency", mode="before")(_lower)

    @model_validator(mode="after")
    def _consistent(self) -> Plan:
        _checked_amount(f"plan {self.id!r}", self.amount, self.currency)
        if self.overage is not None and self.included_calls is None:
            raise ValueError(f"plan {self.id!r}: `overage` needs `included_calls`")
        if self.included_calls is not None and self.overage is None:
            raise ValueError(f"plan {self.id!r}: `included_calls` needs `overage` (block or meter)")
        if self.included_calls == 0 and self.overage == "block":
            raise ValueError(f"plan {self.id!r}: 0 included calls with overage `block` sells nothing")
        return self

    @property
    def counts_calls(self) -> bool:
        """Whether each call of the plan's tools is counted (an included quota, maybe metered past it)."""
        return self.included_calls is not None

    @property
    def meters_overage(self) -> bool:
        return self.overage == "meter"

    @property
    def price_label(self) -> str:
        """Human price, e.g. '9.00 USD / month'. Display only; money stays in minor units."""
        if self.included_calls == 0 and self.amount == 0:
            return f"pay per call, billed each {self.interval}"
        return f"{format_amount(self.amount, self.currency)} / {self.interval}"

    @property
    def allowance_label(self) -> str:
        """What the plan's price buys in calls, e.g. '1,000 calls a month included, then blocked'."""
        if self.included_calls is None:
            return "unlimited calls"
        if self.included_calls == 0:
            return "each call billed at the tool's metered price"
        then = "then billed per call" if self.meters_overage else "then credits or an upgrade"
        return f"{self.included_calls:,} calls a {self.interval} included, {then}"


class MeteredPrice(BaseModel, frozen=True, extra="forbid"):
    """What one call of `tool` costs when billed at period end, through a Stripe Billing Meter."""

    tool: str = Field(pattern=_TOOL)
    lookup_key: str = Field(min_length=1, max_length=200)
    # The meter's event name (Stripe: at most 100 characters); one meter per metered tool.
    event_name: str = Field(pattern=r"^[a-z0-9][a-z0-9_]{0,99}$")
    unit_amount: int = Field(ge=1, le=MAX_UNIT_AMOUNT, description="minor units per call")
    currency: str = Field(pattern=r"^[a-z]{3}$")
    interval: Interval = "month"

    _lower_currency = field_validator("currency", mode="before")(_lower)

    @model_validator(mode="after")
    def _amount_in_iso_minor_units(self) -> MeteredPrice:
        _checked_amount(f"metered price of {self.tool!r}", self.unit_amount, self.currency)
        return self

    @property
    def id(self) -> str:
        """A name for listings beside plan and pack ids."""
        return f"{self.tool}:per-call"

    @property
    def price_label(self) -> str:
        return f"{format_amount(self.unit_amount, self.currency)} per {self.tool} call"


class CreditPack(BaseModel, frozen=True, extra="forbid"):
    """Prepaid calls bought once (Checkout in payment mode); one credit pays one call of any paid tool."""

    id: str = Field(pattern=_ID)
    name: str = Field(min_length=1, max_length=100)
    lookup_key: str = Field(min_length=1, max_length=200)
    credits: int = Field(ge=1, le=MAX_PACK_CREDITS)
    amount: int = Field(ge=1, le=MAX_UNIT_AMOUNT, description="minor units for the whole pack")
    currency: str = Field(pattern=r"^[a-z]{3}$")

    _lower_currency = field_validator("currency", mode="before")(_lower)

    @model_validator(mode="after")
    def _amount_in_iso_minor_units(self) -> CreditPack:
        _checked_amount(f"credit pack {self.id!r}", self.amount, self.currency)
        return self

    @property
    def price_label(self) -> str:
        return f"{format_amount(self.amount, self.currency)} once"


class CatalogFile(BaseModel, frozen=True, extra="forbid"):
    plans: list[Plan] = Field(default_factory=list, max_length=100)
    metered_prices: list[MeteredPrice] = Field(default_factory=list, max_length=100)
    credit_packs: list[CreditPack] = Field(default_factory=list, max_length=20)


class PlanCatalog:
    def __init__(
        self,
        plans: list[Plan],
        metered_prices: list[MeteredPrice] | None = None,
        credit_packs: list[CreditPack] | None = None,
    ) -> None:
        metered = metered_prices or []
        packs = credit_packs or []
        ids = [plan.id for plan in plans]
        if len(set(ids)) != len(ids):
            raise PlanCatalogError("plan ids must be unique")
        pack_ids = [pack.id for pack in packs]
        if len(set(pack_ids)) != len(pack_ids) or set(pack_ids) & set(ids):
            raise PlanCatalogError("credit pack ids must be unique and differ from plan ids")
        keys = [
            *(p.lookup_key for p in plans),
            *(m.lookup_key for m in metered),
            *(k.lookup_key for k in packs),
        ]
        if len(set(keys)) != len(keys):
            raise PlanCatalogError("plan lookup keys must be unique (across plans, metered prices and packs)")
        tools = [price.tool for price in metered]
        if len(set(tools)) != len(tools):
            raise PlanCatalogError("each tool has at most one metered price")
        events = [price.event_name for price in metered]
        if len(set(events)) != len(events):
            raise PlanCatalogError("metered prices' event names must be unique")
        self._metered = {price.tool: price for price in metered}
        for plan in plans:
            if plan.meters_overage:
                self._check_metered_plan(plan)
        self._plans = {plan.id: plan for plan in plans}
        self._by_lookup_key = {plan.lookup_key: plan for plan in plans}
        self._packs = {pack.id: pack for pack in packs}
        self._packs_by_lookup_key = {pack.lookup_key: pack for pack in packs}

    def _check_metered_plan(self, plan: Plan) -> None:
        if not plan.tools:
            raise PlanCatalogError(f"plan {plan.id!r} meters its overage but lists no tools")
        for tool in plan.tools:
            price = self._metered.get(tool)
            if price is None:
                raise PlanCatalogError(
                    f"plan {plan.id!r} meters its overage, but tool {tool!r} has no metered price"
                )
            if (price.currency, price.interval) != (plan.currency, plan.interval):
                raise PlanCatalogError(
                    f"plan {plan.id!r} ({plan.currency}, per {plan.interval}) cannot bill the metered price "
                    f"of {tool!r} ({price.currency}, per {price.interval}): currency and interval must match"
                )

    @classmethod
    def load(cls, path: Path) -> PlanCatalog:
        try:
            data = CatalogFile.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
            return cls(data.plans, data.metered_prices, data.credit_packs)
        except OSError as exc:
            raise PlanCatalogError(f"cannot read plans file {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise PlanCatalogError(f"plans file {path} is not UTF-8 (byte {exc.start})") from exc
        except (tomllib.TOMLDecodeError, ValidationError) as exc:
            raise PlanCatalogError(f"invalid plans file {path}: {exc}") from exc
        except PlanCatalogError as exc:
            raise PlanCatalogError(f"invalid plans file {path}: {exc}") from exc

    def all(self) -> list[Plan]:
        return list(self._plans.values())

    def metered_prices(self) -> list[MeteredPrice]:
        return list(self._metered.values())

    def metered_price(self, tool: str) -> MeteredPrice | None:
        return self._metered.get(tool)

    def metered_prices_of(self, plan: Plan) -> list[MeteredPrice]:
        """The metered prices a subscription to `plan` carries (its tools', when it meters overage)."""
        if not plan.meters_overage:
            return []
        return [self._metered[tool] for tool in plan.tools if tool in self._metered]

    def credit_packs(self) -> list[CreditPack]:
        """Cheapest first."""
        return sorted(self._packs.values(), key=lambda pack: pack.amount)

    def credit_pack(self, pack_id: str) -> CreditPack | None:
        return self._packs.get(pack_id)

    def pack_by_lookup_key(self, lookup_key: str | None) -> CreditPack | None:
        return self._packs_by_lookup_key.get(lookup_key) if lookup_key else None

    def get(self, plan_id: str) -> Plan | None:
        return self._plans.get(plan_id)

    def by_lookup_key(self, lookup_key: str | None) -> Plan | None:
        return self._by_lookup_key.get(lookup_key) if lookup_key else None

    def plans_unlocking(self, tool: str) -> list[Plan]:
        """Cheapest first, so an elicitation offers the least expensive way in; plans billed per call
        come after those with a price per period, whose cost the elicitation's message can state."""
        return sorted((plan for plan in self._plans.values() if tool in plan.tools), key=offer_order)

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
        for price in self._metered.values():
            if price.tool not in paid:
                problems.append(f"metered price names tool {price.tool!r}, which is not a served paid tool")
        if problems:
            raise PlanCatalogError("; ".join(problems))


def offer_order(plan: Plan) -> tuple[bool, int]:
    """Plans with a price per period first, cheapest first; pay-per-call plans after them."""
    return (plan.amount == 0 and plan.included_calls == 0, plan.amount)
