"""Exit codes of the command line beyond 0 (done), 1 (failed) and 2 (configuration error).

Kept apart from the commands, so the parser can name them in its help without importing what the
commands need.
"""

from __future__ import annotations

# `stripe reconcile` skipped or stopped because another process holds the reconciliation lease:
# not a failure (that process does the work), but not "done" either, for scripts that care.
EXIT_LEASE_HELD = 3
# `stripe report-usage`: our counts and Stripe's meter event summaries differ.
EXIT_USAGE_MISMATCH = 3
# `migrate` gave up waiting for a lock another session holds (`DATABASE_MIGRATION_LOCK_TIMEOUT_SECONDS`)
# and changed nothing: running it again later is expected to work.
EXIT_LOCK_WAIT = 4
