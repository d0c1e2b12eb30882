"""Workarounds of dependencies' internals or defects: one module per dependency, each turned
off on a version it was not checked against, each with a test that fails once the dependency no
longer needs it, and a decision record in docs/adr/. Nothing else in service/ may use a
dependency's private names (tests/unit/test_public_apis.py)."""
