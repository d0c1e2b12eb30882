"""A paid MCP service: MCP tools behind URL-mode elicitation, Stripe Checkout and verified webhooks."""
