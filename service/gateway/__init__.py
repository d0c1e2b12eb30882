"""Gateway mode: a paywall in front of an existing (upstream) MCP server.

When `UPSTREAM_MCP_URL` is set, the service reads the upstream's tools at start-up, serves them
under their own names and schemas, runs the same paywall our own paid tools use in front of the
ones the plans file lists, serves free the ones `UPSTREAM_FREE_TOOLS` names, leaves out any other
(an unclassified tool is never served), and forwards each allowed call with the upstream's own credential
(never the caller's token), plus a signed header naming the user, bound to
the call (required in production).

Modules, one job each: `config` (URL rules), `signing` (the user header, copyable by vendors),
`upstream` (talking to the upstream), `tools` (upstream tools as our tools), `wiring` (lifespan).
"""
