"""Plans, Stripe customers and subscriptions, entitlements, and the Stripe webhook."""
