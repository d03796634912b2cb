"""What a probe keeps about the objects it hands a solution, out of those objects' reach.

A probe hands a solution objects (a toy model, an optimizer, a scheduler, a reward function)
and keeps a record of how they were used. The record is kept here, not on the object, which the
solution holds and may edit (an attribute, its __dict__, through copy's helpers). It is keyed by
the object's id, with the object itself held beside it: a weak reference would do (a
WeakKeyDictionary), but anyone holding the object reaches its weak references
(weakref.getweakrefs), and the dictionary's own callback hands over the dictionary.
"""

from __future__ import annotations

from typing import Any


class Records:
    """A record per object, looked up by identity (`records[obj]`)."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[object, Any]] = {}

    def __contains__(self, obj: object) -> bool:
        entry = self._kept.get(id(obj))
        return entry is not None and entry[0] is obj

    def __getitem__(self, obj: object) -> Any:
        if obj not in self:
            raise KeyError(f"no record of this {type(obj).__name__}")
        return self._kept[id(obj)][1]

    def __setitem__(self, obj: object, record: Any) -> None:
        self._kept[id(obj)] = (obj, record)  # holding obj keeps its id from being reused
