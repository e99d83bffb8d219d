"""The text of the engine's point ids, each formatted once."""

from __future__ import annotations

from typing import Any, cast


class IdTexts:
    """The text of the engine's point ids, each formatted once.

    The engine hands every id back as a ``uuid.UUID``, and a search returns up to
    ``candidates`` ids per strategy per query, most of them seen before: formatting each one
    anew cost more than the engine's search itself (docs/benchmarks.md). Keyed by
    the UUID's integer (hashed in C); emptied once it holds ``limit`` ids, so it stays a
    few tens of MB whatever the index holds."""

    def __init__(self, limit: int = 1 << 18) -> None:
        self.limit = limit
        self._texts: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._texts)

    def __call__(self, point_id: Any) -> str:
        key = getattr(point_id, "int", None)
        if key is None:  # an integer or text id: nothing to save
            return str(point_id)
        text = self._texts.get(key)
        if text is None:
            if len(self._texts) >= self.limit:
                self._texts.clear()
            text = self._texts[key] = str(point_id)
        return text

    def many(self, point_ids: list[Any]) -> list[str]:
        """``[self(i) for i in point_ids]``, with one lookup per id, in a comprehension, when
        all are ``uuid.UUID``s seen before (the search path under load)."""
        get = self._texts.get
        try:
            texts = [get(point_id.int) for point_id in point_ids]
        except AttributeError:  # an integer or text id among them
            return [self(point_id) for point_id in point_ids]
        if None in texts:
            return [self(point_id) for point_id in point_ids]
        return cast(list[str], texts)
