"""The credit ledger: grants once per purchase, spends atomically and once per call, takes back unspent."""

from __future__ import annotations

import asyncio

from sqlmodel import col, select

from service.billing.plans import CreditPack
from service.billing.usage import (
    FUNDED_BY_CREDIT,
    PaidCall,
    Refused,
    credit_balance,
    grant_credits,
    ledger_sum,
    meet_credit_payment,
    reinstate_purchase,
    release_call,
    spend_credit,
    take_back_purchase,
)
from service.billing.usage_models import CreditEntry, UsageRecord
from tests.integration.usage.conftest import Ledger, waiting_for_locks

PACK_OF_50 = CreditPack(
    id="calls_50", name="50 calls", lookup_key="k50", credits=50, amount=250, currency="usd"
)


async def grant(ledger: Ledger, user_id: str, source: str, payment_intent: str | None = None) -> bool:
    async with ledger.sessions() as session, session.begin():
        return await grant_credits(
            session, user_id, PACK_OF_50, source=source, payment_intent_id=payment_intent
        )


async def spend(ledger: Ledger, user_id: str, key: str) -> bool:
    try:
        async with ledger.sessions() as session, session.begin():
            decision = await spend_credit(
                session, PaidCall(user_id=user_id, tool="sql_explain", call_key=key)
            )
    except Refused:
        return False
    return decision.allowed


async def balance(ledger: Ledger, user_id: str) -> tuple[int, int]:
    async with ledger.sessions() as session:
        return await credit_balance(session, user_id), await ledger_sum(session, user_id)


async def test_a_purchase_is_granted_once_per_checkout(ledger: Ledger) -> None:
    assert await grant(ledger, ledger.user_id, "checkout:cs_1")
    assert not await grant(ledger, ledger.user_id, "checkout:cs_1"), "a second delivery adds nothing"
    assert await balance(ledger, ledger.user_id) == (50, 50)


async def test_100_parallel_calls_with_50_credits_run_exactly_50(ledger: Ledger) -> None:
    await grant(ledger, ledger.user_id, "checkout:cs_1")
    results = await asyncio.gather(*(spend(ledger, ledger.user_id, f"call-{n}") for n in range(100)))
    assert results.count(True) == 50
    assert await balance(ledger, ledger.user_id) == (0, 0)
    async with ledger.sessions() as session:
        spent = (
            await session.exec(select(UsageRecord).where(col(UsageRecord.funding) == FUNDED_BY_CREDIT))
        ).all()
    assert len(spent) == 50, "a refused call leaves no usage row behind"


async def test_a_retried_call_is_paid_once(ledger: Ledger) -> None:
    await grant(ledger, ledger.user_id, "checkout:cs_1")
    retries = await asyncio.gather(*(spend(ledger, ledger.user_id, "the-same-call") for _ in range(10)))
    assert all(retries)
    assert await balance(ledger, ledger.user_id) == (49, 49)


async def test_no_credits_refuses_and_other_users_credits_do_not_count(ledger: Ledger) -> None:
    other = await ledger.add_user("bob")
    await grant(ledger, other, "checkout:cs_bob")
    assert not await spend(ledger, ledger.user_id, "call-1")
    assert await balance(ledger, ledger.user_id) == (0, 0)
    assert await balance(ledger, other) == (50, 50)


async def test_a_refund_takes_back_only_the_unspent_credits_once(ledger: Ledger) -> None:
    await grant(ledger, ledger.user_id, "checkout:cs_1", payment_intent="pi_1")
    for n in range(30):
        assert await spend(ledger, ledger.user_id, f"call-{n}")
    async with ledger.sessions() as session, session.begin():
        assert await take_back_purchase(session, "pi_1") == (ledger.user_id, 20)
    async with ledger.sessions() as session, session.begin():
        assert await take_back_purchase(session, "pi_1") is None, (
            "a dispute after the refund takes nothing more"
        )
        assert await take_back_purchase(session, "pi_unknown") is None
    assert await balance(ledger, ledger.user_id) == (0, 0)
    async with ledger.sessions() as session:
        reasons = (await session.exec(select(CreditEntry.reason).order_by(col(CreditEntry.id)))).all()
    assert reasons[0] == "purchase" and reasons[-1] == "reversal" and reasons.count("spend") == 30


async def test_a_refund_never_takes_credits_of_another_purchase(ledger: Ledger) -> None:
    await grant(ledger, ledger.user_id, "checkout:cs_1", payment_intent="pi_1")
    await grant(ledger, ledger.user_id, "checkout:cs_2", payment_intent="pi_2")
    async with ledger.sessions() as session, session.begin():
        assert await take_back_purchase(session, "pi_1") == (ledger.user_id, 50)
    assert await balance(ledger, ledger.user_id) == (50, 50)


async def take_back(ledger: Ledger, payment_intent: str) -> int | None:
    async with ledger.sessions() as session, session.begin():
        taken = await take_back_purchase(session, payment_intent)
    return taken[1] if taken is not None else None


async def test_a_refund_of_a_used_up_purchase_leaves_a_later_purchase_alone(ledger: Ledger) -> None:
    await grant(ledger, ledger.user_id, "checkout:cs_1", payment_intent="pi_1")
    for n in range(50):
        assert await spend(ledger, ledger.user_id, f"call-{n}")
    await grant(ledger, ledger.user_id, "checkout:cs_2", payment_intent="pi_2")
    assert await take_back(ledger, "pi_1") == 0, "pi_1's credits were all spent before pi_2 was bought"
    assert await balance(ledger, ledger.user_id) == (50, 50)
    assert await take_back(ledger, "pi_2") == 50


async def test_spends_use_up_the_oldest_purchase_first(ledger: Ledger) -> None:
    await grant(ledger, ledger.user_id, "checkout:cs_1", payment_intent="pi_1")
    await grant(ledger, ledger.user_id, "checkout:cs_2", payment_intent="pi_2")
    for n in range(60):
        assert await spend(ledger, ledger.user_id, f"call-{n}")
    assert await take_back(ledger, "pi_2") == 40, "the first 50 spends were pi_1's"
    assert await take_back(ledger, "pi_1") == 0
    assert await balance(ledger, ledger.user_id) == (0, 0)


async def test_what_a_reversal_took_back_covers_no_later_spend(ledger: Ledger) -> None:
    await grant(ledger, ledger.user_id, "checkout:cs_1", payment_intent="pi_1")
    for n in range(10):
        assert await spend(ledger, ledger.user_id, f"call-{n}")
    assert await take_back(ledger, "pi_1") == 40
    await grant(ledger, ledger.user_id, "checkout:cs_2", payment_intent="pi_2")
    for n in range(10, 40):
        assert await spend(ledger, ledger.user_id, f"call-{n}")
    assert await take_back(ledger, "pi_2") == 20, "the 30 spends after pi_1's refund were pi_2's"
    assert await balance(ledger, ledger.user_id) == (0, 0)


async def grant_paid(ledger: Ledger, payment_intent: str) -> str | None:
    """A purchase's grant as the Stripe sync applies it: the payment's row first; the reversal
    recorded for it before, if any."""
    async with ledger.sessions() as session, session.begin():
        reversed_before = await meet_credit_payment(session, payment_intent)
        await grant_credits(
            session, ledger.user_id, PACK_OF_50, source="checkout:cs_1", payment_intent_id=payment_intent
        )
    return reversed_before


async def reverse(ledger: Ledger, payment_intent: str) -> int | None:
    """A refund as the Stripe sync applies it: recorded on the payment's row, then taken back."""
    async with ledger.sessions() as session, session.begin():
        await meet_credit_payment(session, payment_intent, "refunded")
        taken = await take_back_purchase(session, payment_intent)
    return taken[1] if taken is not None else None


async def test_a_reversal_with_no_purchase_yet_is_kept_for_its_grant(ledger: Ledger) -> None:
    assert await reverse(ledger, "pi_1") is None, "nothing to take back yet"
    assert await grant_paid(ledger, "pi_1") == "refunded"
    async with ledger.sessions() as session, session.begin():
        assert await meet_credit_payment(session, "pi_1", "disputed") == "refunded", "the first one stays"


async def dispute(ledger: Ledger, payment_intent: str) -> int | None:
    """A dispute as the Stripe sync applies it: recorded on the payment's row, then taken back."""
    async with ledger.sessions() as session, session.begin():
        await meet_credit_payment(session, payment_intent, "disputed")
        taken = await take_back_purchase(session, payment_intent)
    return taken[1] if taken is not None else None


async def reinstate(ledger: Ledger, payment_intent: str) -> int | None:
    async with ledger.sessions() as session, session.begin():
        given = await reinstate_purchase(session, payment_intent)
    return given[1] if given is not None else None


async def test_a_won_dispute_gives_back_what_it_took_once(ledger: Ledger) -> None:
    await grant(ledger, ledger.user_id, "checkout:cs_1", payment_intent="pi_1")
    for n in range(10):
        assert await spend(ledger, ledger.user_id, f"call-{n}")
    assert await dispute(ledger, "pi_1") == 40
    assert await reinstate(ledger, "pi_1") == 40
    assert await reinstate(ledger, "pi_1") is None, "a second delivery gives nothing more"
    assert await balance(ledger, ledger.user_id) == (40, 40)
    assert await reverse(ledger, "pi_1") == 40, "a refund after the win takes the credits back"
    assert await balance(ledger, ledger.user_id) == (0, 0)


async def test_a_won_dispute_after_a_refund_gives_nothing(ledger: Ledger) -> None:
    await grant(ledger, ledger.user_id, "checkout:cs_1", payment_intent="pi_1")
    assert await reverse(ledger, "pi_1") == 50
    assert await reinstate(ledger, "pi_1") is None
    await grant(ledger, ledger.user_id, "checkout:cs_2", payment_intent="pi_2")
    assert await dispute(ledger, "pi_2") == 50
    assert await reverse(ledger, "pi_2") is None, "the dispute took the credits already"
    assert await reinstate(ledger, "pi_2") is None, "the refund, not the dispute, has the last word"
    assert await balance(ledger, ledger.user_id) == (0, 0)


async def test_a_dispute_won_before_its_grant_leaves_the_grant_standing(ledger: Ledger) -> None:
    assert await dispute(ledger, "pi_1") is None, "nothing to take back yet"
    assert await reinstate(ledger, "pi_1") is None, "nor to give back"
    assert await grant_paid(ledger, "pi_1") == "reinstated", "not a reversal: the grant stands"


async def test_credits_given_back_cover_later_spends_first(ledger: Ledger) -> None:
    await grant(ledger, ledger.user_id, "checkout:cs_1", payment_intent="pi_1")
    assert await dispute(ledger, "pi_1") == 50
    assert await reinstate(ledger, "pi_1") == 50
    await grant(ledger, ledger.user_id, "checkout:cs_2", payment_intent="pi_2")
    for n in range(60):
        assert await spend(ledger, ledger.user_id, f"call-{n}")
    assert await take_back(ledger, "pi_2") == 40, "the first 50 spends were pi_1's, given back"


async def test_a_reversal_racing_its_purchase_grant_waits_for_it_and_takes_it_back(postgres: Ledger) -> None:
    async with postgres.sessions() as session, session.begin():
        assert await meet_credit_payment(session, "pi_1") is None
        await grant_credits(
            session, postgres.user_id, PACK_OF_50, source="checkout:cs_1", payment_intent_id="pi_1"
        )
        # The refund starts while the grant is not committed: it must not miss the purchase.
        refund = asyncio.create_task(reverse(postgres, "pi_1"))
        await waiting_for_locks(postgres, 1)
    assert await refund == 50
    assert await balance(postgres, postgres.user_id) == (0, 0)


async def test_a_grant_racing_its_payment_reversal_waits_for_it_and_sees_it(postgres: Ledger) -> None:
    async with postgres.sessions() as session, session.begin():
        await meet_credit_payment(session, "pi_1", "refunded")
        assert await take_back_purchase(session, "pi_1") is None, "no purchase yet"
        # The grant starts while the refund is not committed: it must not miss the refund.
        grant_of_pi_1 = asyncio.create_task(grant_paid(postgres, "pi_1"))
        await waiting_for_locks(postgres, 1)
    assert await grant_of_pi_1 == "refunded"


async def test_a_give_back_racing_a_refund_waits_for_it_and_gives_nothing_back(postgres: Ledger) -> None:
    await grant_paid(postgres, "pi_1")
    async with postgres.sessions() as session, session.begin():
        spent = await spend_credit(session, PaidCall(user_id=postgres.user_id, tool="t", call_key="call-1"))
    assert spent.usage_id is not None
    usage_id = spent.usage_id

    async def give_back() -> str | None:
        async with postgres.sessions() as session, session.begin():
            return await release_call(session, postgres.user_id, usage_id)

    # The refund is being applied, counting the running call's credit as spent, when the call fails.
    async with postgres.sessions() as session, session.begin():
        await meet_credit_payment(session, "pi_1", "refunded")
        assert await take_back_purchase(session, "pi_1") == (postgres.user_id, 49)
        giving_back = asyncio.create_task(give_back())
        await waiting_for_locks(postgres, 1)
    assert await giving_back == FUNDED_BY_CREDIT
    assert await balance(postgres, postgres.user_id) == (0, 0), "no credit of the refunded purchase"
