import sys
from pathlib import Path

# The store test helpers (hand-made chunks, store factories) are shared with these tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve_app" / "stores"))
