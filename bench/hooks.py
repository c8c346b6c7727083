"""Timing hooks on rladv's own functions, for the timeline scripts (``timeline.py``, ``ray_timeline.py``)."""
from __future__ import annotations

from typing import Callable, Optional


def wrap(owner, name: str, before: Optional[str], after: Optional[str], note: Callable[[str], None]) -> None:
    """Replace ``owner.name`` by a function that calls ``note(before)``, the original, then ``note(after)`` (also
    when it raises). A function that is gone raises ``AttributeError`` here: a timeline never goes silently short."""
    original = getattr(owner, name)

    def hooked(*args, **kwargs):
        if before:
            note(before)
        try:
            return original(*args, **kwargs)
        finally:
            if after:
                note(after)

    setattr(owner, name, hooked)
