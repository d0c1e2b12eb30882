"""`POST /webhooks/stripe`: verify, store once, apply in the same transaction, then announce."""
