"""What a replica's own code logs reaches the replica's stderr file as it happens.

Throughput-optimised Serve (the default here, ``serve.env``) points ``sys.stderr`` of each
replica at Serve's logger, which logs every line at INFO into a 1,000-record buffer that only
an ERROR record of Serve's own, or a full buffer, flushes: a store replica's "recovery
failed" error would wait there unseen. serve_app's loggers therefore write JSON lines to the
process's own stderr (``sys.__stderr__``: Ray's ``worker-*.err`` of the replica, which a
log collector tails with Serve's files).
"""

from __future__ import annotations

import sys

from serve_app.api.observability import configure_json_logging


def configure_replica_logging(access_log: bool = False) -> None:
    configure_json_logging(access_log=access_log, stream=sys.__stderr__ or sys.stderr)
