"""The files of an embedded index directory (``stores.embedded.path``)."""

from __future__ import annotations

META_FILE = "index_meta.json"

RESTORE_ASIDE = ".restore-previous"  # the old index while a restore moves the new one in

REGISTRY_FILE = "collections.json"

SHARD_DIR = "shard"
