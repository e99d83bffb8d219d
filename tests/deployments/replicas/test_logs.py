"""A replica's expected refusal (the LLM replica's 429, any 4xx the library raises on purpose)
is one WARNING line without a traceback in Serve's log; anything else keeps its traceback.
Serve's own call is reproduced as it is made (``replica.py``: ``logger.exception("Request
failed.")`` inside the ``except`` around the user's method)."""

from __future__ import annotations

import logging

import pytest

from deployments.replicas.logs import SERVE_LOGGER, configure_replica_logging
from serve_app.errors import OverloadedError, PayloadTooLargeError, UnauthenticatedError


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def serve_logs_a_failed_request(error: BaseException) -> list[logging.LogRecord]:
    configure_replica_logging()
    handler = Records()
    serve_logger = logging.getLogger(SERVE_LOGGER)
    serve_logger.addHandler(handler)
    try:
        try:
            raise error
        except Exception:
            serve_logger.exception("Request failed.")
    finally:
        serve_logger.removeHandler(handler)
    return handler.records


@pytest.mark.parametrize(
    "error",
    [
        OverloadedError("every generation slot is taken", retry_after_s=2),
        PayloadTooLargeError("too big"),
        UnauthenticatedError("invalid API key"),
    ],
    ids=lambda e: e.code,
)
def test_an_expected_refusal_is_one_warning_line_without_a_traceback(error):
    (record,) = serve_logs_a_failed_request(error)
    assert record.levelno == logging.WARNING
    assert record.exc_info is None and record.exc_text is None
    line = logging.Formatter().format(record)
    assert error.code in line and str(error) in line and "Traceback" not in line


def test_an_unexpected_error_keeps_its_traceback():
    (record,) = serve_logs_a_failed_request(RuntimeError("bug"))
    assert record.levelno == logging.ERROR
    assert "Traceback" in logging.Formatter().format(record)
