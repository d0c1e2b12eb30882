"""Real-browser steps: Debian's chromium through Playwright, on pages served on loopback.

The checkout selectors are Stripe Checkout's own, so the same steps drive checkout.stripe.com.
"""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Browser, Page, expect

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 15_000


async def new_page(browser: Browser) -> Page:
    """A page in a fresh context (no cookies shared with other pages), waiting at most TIMEOUT_MS."""
    page = await (await browser.new_context()).new_page()
    page.set_default_timeout(TIMEOUT_MS)
    return page


async def fill_stripe_checkout(page: Page, card: str, *, email: str = "ada@example.com") -> None:
    email_field = page.locator("#email")
    if await email_field.is_editable():  # read-only when the session has a customer, as on Stripe
        await email_field.fill(email)
    await page.fill("#cardNumber", card)
    await page.fill("#cardExpiry", "12 / 34")
    await page.fill("#cardCvc", "123")
    await page.fill("#billingName", "Ada Lovelace")
    submit = page.locator("button[type=submit]")
    await expect(submit).to_have_count(1)
    await submit.click()


async def log_in(page: Page, username: str, password: str) -> None:
    await page.fill("#username", username)
    await page.fill("#password", password)
    await page.click("#login-submit")


async def pay_in_browser(page: Page, payment_url: str, username: str, password: str, card: str) -> None:
    """Open the elicitation URL as the user would: sign in, confirm on our page, pay on Checkout."""
    await page.goto(payment_url)
    if "/login" in page.url:
        await log_in(page, username, password)
    await page.wait_for_url(payment_url)
    await expect(page.locator("#plan-name")).to_be_visible()
    await page.click("#pay-button")
    await page.wait_for_url("**/c/pay/cs_*")
    await fill_stripe_checkout(page, card)
