"""A model replica says what its start-up warm-up ran (serve_app's encoders run it before the
replica takes requests; ``warmup`` in their configuration)."""

from __future__ import annotations

import os


def log_warmup(name: str, encoder: object) -> None:
    """Written to the process's stderr file (Ray's ``worker-*.err`` of the replica), not
    through ``sys.stderr`` or a logger: throughput-optimised Serve sends both into the
    replica's log through a 1,000-record buffer that a start-up line may never leave."""
    report = getattr(encoder, "warmup", None)
    if report is None:
        return
    line = (
        f"{name} warm-up: {len(report.shapes)} batch shapes in {report.total_s:.2f} s before "
        f"taking requests (slowest {max(report.seconds) * 1e3:.1f} ms)\n"
    )
    os.write(2, line.encode())
