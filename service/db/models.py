"""Imports every table module so `metadata` is complete for Alembic and the model/migration check."""

from service.audit import models as audit_models
from service.billing import models as billing_models
from service.billing import usage_models
from service.db.metadata import metadata
from service.identity import models as identity_models
from service.identity.oidc import models as oidc_models
from service.paywall import models as paywall_models

__all__ = [
    "audit_models",
    "billing_models",
    "identity_models",
    "metadata",
    "oidc_models",
    "paywall_models",
    "usage_models",
]
