"""Imports every table module so `metadata` is complete for Alembic and the model/migration check."""

from service.db.metadata import metadata
from service.identity import models as identity_models

__all__ = ["identity_models", "metadata"]
