"""The audit trail: security-relevant and money-relevant events, append-only."""
