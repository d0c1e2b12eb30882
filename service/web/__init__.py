"""Browser-facing plumbing shared by every page: templates, cookies, CSRF, security headers."""
