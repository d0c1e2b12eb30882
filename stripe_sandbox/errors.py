"""Errors in Stripe's wire format.

stripe-python maps the HTTP status and `error.type` to its exception classes (400/404 ->
InvalidRequestError, 401 -> AuthenticationError, 402 -> CardError, `idempotency_error` ->
IdempotencyError), so the status and type here must match Stripe's exactly for service code written
against real Stripe to take the same branches.
"""

from __future__ import annotations

from typing import Any


class StripeError(Exception):
    """An error response; raised anywhere in a request and rendered by the app."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        decline_code: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param
        self.decline_code = decline_code
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"message": self.message, "type": self.type}
        if self.code is not None:
            error["code"] = self.code
            error["doc_url"] = f"https://stripe.com/docs/error-codes/{self.code.replace('_', '-')}"
        if self.param is not None:
            error["param"] = self.param
        if self.decline_code is not None:
            error["decline_code"] = self.decline_code
        error.update(self.extra)
        return {"error": error}


def resource_missing(kind: str, object_id: str, *, param: str = "id") -> StripeError:
    """Unknown id. A path id is a 404; an id passed as a parameter is a 400, as on Stripe."""
    status = 404 if param == "id" else 400
    return StripeError(status, f"No such {kind}: '{object_id}'", code="resource_missing", param=param)


def parameter_missing(param: str) -> StripeError:
    return StripeError(400, f"Missing required param: {param}.", code="parameter_missing", param=param)


def parameter_unknown(param: str) -> StripeError:
    return StripeError(
        400,
        f"Received unknown parameter: {param}",
        code="parameter_unknown",
        param=param,
    )


def parameter_invalid(param: str, message: str, *, code: str = "parameter_invalid_empty") -> StripeError:
    return StripeError(400, message, code=code, param=param)


def invalid_request(message: str, *, param: str | None = None, code: str | None = None) -> StripeError:
    return StripeError(400, message, param=param, code=code)


def idempotency_mismatch(key: str) -> StripeError:
    return StripeError(
        400,
        "Keys for idempotent requests can only be used with the same parameters they were first used "
        f"with. Try using a key other than '{key}' if you meant to execute a different request.",
        type_="idempotency_error",
    )


def missing_api_key() -> StripeError:
    return StripeError(
        401,
        "You did not provide an API key. You need to provide your API key in the Authorization header, "
        "using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See "
        "https://stripe.com/docs/api#authentication for details, or we can help at "
        "https://support.stripe.com/.",
    )


def invalid_api_key(key: str) -> StripeError:
    shown = f"{key[:8]}{'*' * 12}{key[-4:]}" if len(key) > 12 else "*" * len(key)
    return StripeError(401, f"Invalid API Key provided: {shown}", code="api_key_invalid")


def unrecognized_url(method: str, path: str) -> StripeError:
    return StripeError(
        404,
        f"Unrecognized request URL ({method}: {path}). Please see https://stripe.com/docs or we can "
        "help at https://support.stripe.com/.",
    )


def rate_limited() -> StripeError:
    return StripeError(
        429,
        "Request rate limit exceeded. You can learn more about rate limits here "
        "https://stripe.com/docs/rate-limits.",
        code="rate_limit",
    )


def unsupported_version(asked: str, implemented: str) -> StripeError:
    return StripeError(
        400,
        f"Invalid Stripe API version: {asked}. The sandbox implements API version {implemented} only.",
        code="api_version_invalid",
    )
