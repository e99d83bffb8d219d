"""One report writer and one plot style for every suite: ``STEM.json`` (the figures),
``STEM.md`` (the same as tables, also printed) and, where a suite plots, ``STEM.png``; a stem
not given is named as results are, by date, hardware and measure
(``benchmarks/results/2026-11-27-h100-load-sweep``)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterable, Sequence
from datetime import date
from pathlib import Path
from typing import Any

RESULTS = Path("benchmarks") / "results"
STYLE = {
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 9,
}


def hardware() -> str:
    """``h100``, ``h200``...: the model in the first GPU's name; ``cpuN`` (N cores) without one."""
    query = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]
    try:
        words = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError):
        words = []
    model = next((w for w in words if any(c.isdigit() for c in w)), None)
    return model.lower() if model else f"cpu{os.cpu_count()}"


def default_stem(measure: str) -> Path:
    return RESULTS / f"{date.today().isoformat()}-{hardware()}-{measure}"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def beside(stem: Path, suffix: str) -> Path:
    """``stem`` with ``suffix`` added (a stem may hold dots: ``ingest-chunker-0.5``)."""
    return stem.with_name(stem.name + suffix)


def write_report(stem: Path, report: dict, markdown: Iterable[str]) -> None:
    text = "\n".join(markdown).rstrip("\n") + "\n"
    stem.parent.mkdir(parents=True, exist_ok=True)
    beside(stem, ".json").write_text(json.dumps(report, indent=2))
    beside(stem, ".md").write_text(text)
    print(text, flush=True)


def plot(
    path: Path,
    title: str,
    axes: tuple[str, str],
    draw: Callable[[Any], None],
    size: tuple[float, float] = (7, 4.5),
    log: str = "",
) -> None:
    """A figure in the suites' one style: ``draw(ax)`` draws, ``log`` names the log axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=size)
        draw(ax)
        for axis in log:
            getattr(ax, f"set_{axis}scale")("log")
        ax.set(title=title, xlabel=axes[0], ylabel=axes[1])
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
