"""Stripe synchronisation: `POST /webhooks/stripe` (verify, store once, apply in the same transaction,
then announce) and the reconciliation that repairs what missed webhooks left wrong."""
