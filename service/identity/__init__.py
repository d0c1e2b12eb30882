"""Who a caller is: local accounts, the built-in OAuth 2.1 server, personal tokens, browser sessions."""
