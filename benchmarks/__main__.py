"""Every benchmark suite of the project behind one entry point: ``python -m benchmarks SUITE``.

Each suite writes its report as JSON and Markdown (and a plot where it draws one), named by
date, hardware and measure under benchmarks/results/ unless ``--out`` names it; see
docs/benchmarks.md for what each measures and the current figures.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

SUITES = [
    "load",
    "ingest",
    "quality",
    "startup",
    "scale",
    "search-during-ingest",
    "serving-path",
    "gpu",
    "answers",
    "playground",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    suites = parser.add_subparsers(dest="suite", required=True)
    for name in SUITES:
        module = importlib.import_module(f"benchmarks.{name.replace('-', '_')}")
        doc = module.__doc__ or name
        suite = suites.add_parser(
            name,
            help=doc.splitlines()[0],
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(suite)
        suite.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    # The models come from installed packages: nothing is fetched while measuring.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
