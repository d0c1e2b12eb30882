"""Subscriptions over time: cancel/resume, renewals, failed renewals, refunds, disputes, portal."""

from __future__ import annotations

from typing import Any

import pytest
import stripe

from tests.support.stripe_objects import expanded, present, unexpanded

from .conftest import Env, subscribed

MONTH = 31 * 86400


async def _events(env: Env, type_: str) -> list[Any]:
    return list((await env.client.v1.events.list_async(params={"type": type_, "limit": 100})).data)


async def test_cancel_at_period_end_and_resume(env: Env) -> None:
    sub = (await subscribed(env))["subscription"]
    end = sub["items"].data[0].current_period_end
    updated = await env.client.v1.subscriptions.update_async(
        sub.id, params={"cancel_at_period_end": True, "metadata": {"reason": "too pricey"}}
    )
    assert updated.cancel_at_period_end is True and updated.cancel_at == end and updated.status == "active"
    assert updated.metadata.to_dict() == {"account": "acct-1", "reason": "too pricey"}
    event, activated = await _events(env, "customer.subscription.updated")
    assert activated.data.previous_attributes.status == "incomplete"
    assert event.data.previous_attributes.cancel_at_period_end is False
    assert event.data.previous_attributes.metadata.to_dict() == {"reason": None}
    resumed = await env.client.v1.subscriptions.update_async(sub.id, params={"cancel_at_period_end": False})
    assert resumed.cancel_at_period_end is False and resumed.cancel_at is None
    await env.client.v1.subscriptions.update_async(sub.id, params={"cancel_at_period_end": True})
    await env.advance(MONTH + 1)
    ended = await env.client.v1.subscriptions.retrieve_async(sub.id)
    assert ended.status == "canceled" and ended.ended_at == end
    assert len(await _events(env, "customer.subscription.deleted")) == 1
    assert len((await env.client.v1.invoices.list_async(params={"subscription": sub.id})).data) == 1


async def test_cancel_immediately_and_list_filters(env: Env) -> None:
    state = await subscribed(env)
    sub, customer = state["subscription"], state["customer"]
    listed = await env.client.v1.subscriptions.list_async(params={"customer": customer.id})
    assert [s.id for s in listed.data] == [sub.id]
    canceled = await env.client.v1.subscriptions.cancel_async(sub.id)
    assert canceled.status == "canceled" and canceled.canceled_at is not None
    assert (await env.client.v1.subscriptions.list_async(params={"customer": customer.id})).data == []
    everything = await env.client.v1.subscriptions.list_async(
        params={"customer": customer.id, "status": "all"}
    )
    assert [s.id for s in everything.data] == [sub.id]
    assert [
        s.id for s in (await env.client.v1.subscriptions.list_async(params={"status": "canceled"})).data
    ] == [sub.id]
    with pytest.raises(stripe.InvalidRequestError):
        await env.client.v1.subscriptions.cancel_async(sub.id)
    with pytest.raises(stripe.InvalidRequestError):
        await env.client.v1.subscriptions.update_async(sub.id, params={"cancel_at_period_end": True})


async def test_renewals_bill_each_period(env: Env) -> None:
    sub = (await subscribed(env))["subscription"]
    first_end = sub["items"].data[0].current_period_end
    await env.advance(MONTH + 1)
    renewed = await env.client.v1.subscriptions.retrieve_async(sub.id)
    item = renewed["items"].data[0]
    assert item.current_period_start == first_end and renewed.status == "active"
    invoices = (await env.client.v1.invoices.list_async(params={"subscription": sub.id})).data
    assert [(i.billing_reason, i.status) for i in invoices] == [
        ("subscription_cycle", "paid"),
        ("subscription_create", "paid"),
    ]
    assert renewed.latest_invoice == invoices[0].id
    updated, _activated = await _events(env, "customer.subscription.updated")
    previous = updated.data.previous_attributes
    assert previous.latest_invoice == sub.latest_invoice
    assert previous["items"].data[0].current_period_end == first_end
    await env.advance(2 * MONTH)
    assert len((await env.client.v1.invoices.list_async(params={"subscription": sub.id})).data) >= 4


async def test_failed_renewal_goes_past_due_then_canceled(env: Env) -> None:
    state = await subscribed(env)
    sub, customer = state["subscription"], state["customer"]
    await env.raw(f"/v1/test_helpers/customers/{customer.id}/fail_renewals", fail=True)
    await env.advance(MONTH + 1)
    past_due = await env.client.v1.subscriptions.retrieve_async(sub.id, params={"expand": ["latest_invoice"]})
    assert past_due.status == "past_due"
    invoice = expanded(past_due.latest_invoice)
    assert (invoice.status, invoice.attempt_count) == ("open", 1) and invoice.next_payment_attempt is not None
    [failed] = await _events(env, "invoice.payment_failed")
    assert failed.data.object.id == invoice.id
    updated, _activated = await _events(env, "customer.subscription.updated")
    assert updated.data.previous_attributes.status == "active"
    await env.advance(20 * 86400)  # all retries (3, 5, 7 days) fail
    canceled = await env.client.v1.subscriptions.retrieve_async(sub.id)
    assert canceled.status == "canceled"
    assert present(canceled.cancellation_details).reason == "payment_failed"
    assert len(await _events(env, "invoice.payment_failed")) == 4
    assert len(await _events(env, "customer.subscription.deleted")) == 1


async def test_failed_renewal_recovers_on_retry(env: Env) -> None:
    state = await subscribed(env)
    sub, customer = state["subscription"], state["customer"]
    env.sandbox.set_renewal_failure(customer.id, True)
    await env.advance(MONTH + 1)
    assert (await env.client.v1.subscriptions.retrieve_async(sub.id)).status == "past_due"
    env.sandbox.set_renewal_failure(customer.id, False)
    await env.advance(3 * 86400)
    recovered = await env.client.v1.subscriptions.retrieve_async(
        sub.id, params={"expand": ["latest_invoice"]}
    )
    latest_invoice = expanded(recovered.latest_invoice)
    assert recovered.status == "active" and latest_invoice.status == "paid"
    assert latest_invoice.attempt_count == 2


async def test_unpaid_final_status_is_configurable(receiver: Any) -> None:
    from .conftest import sandbox_env

    async with sandbox_env(receiver, final_failure_status="unpaid") as env:
        state = await subscribed(env)
        env.sandbox.set_renewal_failure(state["customer"].id, True)
        await env.advance(MONTH + 20 * 86400)
        assert (await env.client.v1.subscriptions.retrieve_async(state["subscription"].id)).status == "unpaid"


async def test_refund_and_dispute(env: Env) -> None:
    sub = (await subscribed(env))["subscription"]
    invoice = await env.client.v1.invoices.retrieve_async(
        unexpanded(sub.latest_invoice), params={"expand": ["payments"]}
    )
    assert invoice.payments is not None
    intent = await env.client.v1.payment_intents.retrieve_async(
        unexpanded(invoice.payments.data[0].payment.payment_intent)
    )
    charge_id = unexpanded(intent.latest_charge)
    refund = await env.client.v1.refunds.create_async(params={"charge": charge_id, "amount": 500})
    assert (refund.status, refund.amount, refund.charge) == ("succeeded", 500, charge_id)
    charge = await env.client.v1.charges.retrieve_async(charge_id, params={"expand": ["refunds"]})
    assert (charge.amount_refunded, charge.refunded) == (500, False)
    assert charge.refunds is not None and [r.id for r in charge.refunds.data] == [refund.id]
    rest = await env.client.v1.refunds.create_async(params={"payment_intent": intent.id})
    assert rest.amount == 1000
    with pytest.raises(stripe.InvalidRequestError) as info:
        await env.client.v1.refunds.create_async(params={"charge": charge_id})
    assert info.value.code == "charge_already_refunded"
    refunded = await _events(env, "charge.refunded")
    assert len(refunded) == 2 and refunded[0].data.object.refunded is True
    assert refunded[1].data.previous_attributes.amount_refunded == 0
    dispute = await env.raw(f"/v1/test_helpers/charges/{charge_id}/dispute", reason="fraudulent")
    assert isinstance(dispute, stripe.Dispute)
    assert dispute.object == "dispute" and dispute.charge == charge_id
    [created] = await _events(env, "charge.dispute.created")
    assert created.data.object.id == dispute.id
    assert (await env.client.v1.disputes.retrieve_async(dispute.id)).status == "needs_response"
    assert (await env.client.v1.charges.retrieve_async(charge_id)).disputed is True


@pytest.mark.parametrize("evidence", ["winning_evidence", "losing_evidence"])
async def test_a_decided_dispute_closes_and_a_won_one_reinstates_the_funds(env: Env, evidence: str) -> None:
    sub = (await subscribed(env))["subscription"]
    [charge] = (await env.client.v1.charges.list_async(params={"customer": unexpanded(sub.customer)})).data
    dispute = await env.raw(f"/v1/test_helpers/charges/{charge.id}/dispute")
    assert isinstance(dispute, stripe.Dispute)
    [withdrawn] = await _events(env, "charge.dispute.funds_withdrawn")
    assert withdrawn.data.object.id == dispute.id
    await env.client.v1.disputes.update_async(
        dispute.id, params={"evidence": {"uncategorized_text": evidence}, "submit": True}
    )
    won = evidence == "winning_evidence"
    [closed] = await _events(env, "charge.dispute.closed")
    assert (closed.data.object.id, closed.data.object.status) == (dispute.id, "won" if won else "lost")
    reinstated = await _events(env, "charge.dispute.funds_reinstated")
    assert [event.data.object.status for event in reinstated] == (["won"] if won else [])
    assert (await env.client.v1.charges.retrieve_async(charge.id)).disputed is True, "whatever the outcome"
    # A won dispute makes the charge refundable again; a lost one keeps it charged back.
    assert (await env.client.v1.disputes.retrieve_async(dispute.id)).is_charge_refundable is won
    if won:
        assert (await env.client.v1.refunds.create_async(params={"charge": charge.id})).status == "succeeded"
    else:
        with pytest.raises(stripe.InvalidRequestError) as info:
            await env.client.v1.refunds.create_async(params={"charge": charge.id})
        assert info.value.code == "charge_disputed"


async def test_an_inquiry_withdraws_nothing_until_it_escalates(env: Env) -> None:
    sub = (await subscribed(env, card="4000000000001976"))["subscription"]
    [charge] = (await env.client.v1.charges.list_async(params={"customer": unexpanded(sub.customer)})).data
    assert charge.disputed is True, "card 1976 opens an inquiry on its charge"
    [dispute] = (await env.client.v1.disputes.list_async(params={"charge": charge.id})).data
    assert (dispute.status, dispute.is_charge_refundable, dispute.balance_transactions) == (
        "warning_needs_response",
        True,
        [],
    )
    assert [event.data.object.id for event in await _events(env, "charge.dispute.created")] == [dispute.id]
    assert await _events(env, "charge.dispute.funds_withdrawn") == []

    # Stripe submits evidence unless told not to; this text escalates the inquiry to a chargeback.
    escalated = await env.client.v1.disputes.update_async(
        dispute.id, params={"evidence": {"uncategorized_text": "escalate_inquiry_evidence"}}
    )
    assert (escalated.status, escalated.is_charge_refundable) == ("needs_response", False)
    [withdrawal] = escalated.balance_transactions
    assert (withdrawal.amount, withdrawal.fee) == (-charge.amount, 1500)
    [withdrawn] = await _events(env, "charge.dispute.funds_withdrawn")
    assert (withdrawn.data.object.id, withdrawn.data.object.status) == (dispute.id, "needs_response")
    [updated] = await _events(env, "charge.dispute.updated")
    assert updated.data.previous_attributes.status == "warning_needs_response"
    with pytest.raises(stripe.InvalidRequestError) as info:
        await env.client.v1.refunds.create_async(params={"charge": charge.id})
    assert info.value.code == "charge_disputed"


@pytest.mark.parametrize("answer", ["winning_evidence", "losing_evidence", "close"])
async def test_an_answered_or_accepted_inquiry_closes_without_moving_funds(env: Env, answer: str) -> None:
    sub = (await subscribed(env))["subscription"]
    [charge] = (await env.client.v1.charges.list_async(params={"customer": unexpanded(sub.customer)})).data
    inquiry = await env.raw(f"/v1/test_helpers/charges/{charge.id}/dispute", case_type="inquiry")
    assert isinstance(inquiry, stripe.Dispute) and inquiry.status == "warning_needs_response"
    if answer == "close":
        await env.client.v1.disputes.close_async(inquiry.id)
    else:
        await env.client.v1.disputes.update_async(
            inquiry.id, params={"evidence": {"uncategorized_text": answer}}
        )
    [closed] = await _events(env, "charge.dispute.closed")
    assert (closed.data.object.id, closed.data.object.status) == (inquiry.id, "warning_closed")
    assert await _events(env, "charge.dispute.funds_withdrawn") == []
    assert await _events(env, "charge.dispute.funds_reinstated") == []
    assert (await env.client.v1.disputes.retrieve_async(inquiry.id)).balance_transactions == []
    assert (await env.client.v1.refunds.create_async(params={"charge": charge.id})).status == "succeeded"


async def test_billing_portal_session(env: Env) -> None:
    customer = (await subscribed(env))["customer"]
    portal = await env.client.v1.billing_portal.sessions.create_async(
        params={"customer": customer.id, "return_url": "https://app.example/account"}
    )
    assert portal.object == "billing_portal.session" and portal.customer == customer.id
    assert (
        portal.url.startswith(f"{env.base_url}/p/session/")
        and portal.return_url == "https://app.example/account"
    )
    with pytest.raises(stripe.InvalidRequestError) as info:
        await env.client.v1.billing_portal.sessions.create_async(params={"customer": "cus_missing"})
    assert info.value.param == "customer"
