"""The indexes a paid call writes serve the queries that read them: the partial ones too."""

from __future__ import annotations

from sqlalchemy import ClauseElement

from service.billing.usage import metered_in_period, purchase_paid_by
from tests.integration.usage.conftest import Ledger


async def plan_of(ledger: Ledger, statement: ClauseElement) -> str:
    """The backend's query plan for `statement`, as text; PostgreSQL told to avoid full scans, so
    an index it can use is the one it picks even on an empty table."""
    dialect = ledger.engine.dialect
    sql = str(statement.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
    async with ledger.engine.connect() as connection, connection.begin():
        if dialect.name == "sqlite":
            rows = (await connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")).all()
            return "\n".join(str(row[-1]) for row in rows)
        await connection.exec_driver_sql("SET LOCAL enable_seqscan = off")  # this transaction only
        rows = (await connection.exec_driver_sql(f"EXPLAIN {sql}")).all()
        return "\n".join(str(row[0]) for row in rows)


async def test_billing_status_sums_metered_calls_through_their_partial_index(ledger: Ledger) -> None:
    plan = await plan_of(ledger, metered_in_period("sub_1", "2026-12-01T00:00:00+00:00"))
    assert "ix_usage_record_metered_period" in plan, plan


async def test_a_refund_finds_its_purchase_through_the_partial_payment_index(ledger: Ledger) -> None:
    plan = await plan_of(ledger, purchase_paid_by("pi_1"))
    assert "ix_credit_entry_payment_intent_id" in plan, plan
