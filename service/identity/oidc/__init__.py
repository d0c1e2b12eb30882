"""An external OpenID Connect provider in place of the built-in authorization server (OIDC_ISSUER)."""
