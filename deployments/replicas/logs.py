"""What a replica's own code logs reaches the replica's stderr file as it happens, and an
expected refusal is one WARNING line, not an ERROR with a traceback.

Throughput-optimised Serve (the default here, ``serve.env``) points ``sys.stderr`` of each
replica at Serve's logger, which logs every line at INFO into a 1,000-record buffer that only
an ERROR record of Serve's own, or a full buffer, flushes: a store replica's "recovery
failed" error would wait there unseen. serve_app's loggers therefore write JSON lines to the
process's own stderr (``sys.__stderr__``: Ray's ``worker-*.err`` of the replica, which a
log collector tails with Serve's files).

Serve logs every exception a replica's method raises as ``logger.exception("Request
failed.")`` (``replica.py``, ``_handle_errors_and_metrics``): the LLM replica's 429 (every
slot taken) was an ERROR with a full traceback. ``ExpectedRefusals`` turns such a record,
when the exception is one the library raises on purpose with a 4xx status, into one WARNING
line naming its code, without the traceback; anything else keeps its traceback.
"""

from __future__ import annotations

import logging
import sys

from serve_app.api.observability import configure_json_logging
from serve_app.errors import ServeAppError

SERVE_LOGGER = "ray.serve"


class ExpectedRefusals(logging.Filter):
    """Serve's "Request failed." records for a 4xx ``ServeAppError``: WARNING, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, ServeAppError) and error.status < 500:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg, record.args = (
                f"request refused: {error.code} ({error.status}): %s",
                (error,),
            )
            record.exc_info = record.exc_text = None
        return True


def configure_replica_logging(access_log: bool = False) -> None:
    configure_json_logging(access_log=access_log, stream=sys.__stderr__ or sys.stderr)
    serve_logger = logging.getLogger(SERVE_LOGGER)
    if not any(isinstance(f, ExpectedRefusals) for f in serve_logger.filters):
        serve_logger.addFilter(ExpectedRefusals())
