"""Durations as the admin's pages write them."""

from __future__ import annotations


def span(seconds: float) -> str:
    """3725 -> "1 h 02 min"; 185 -> "3 min 05 s"; 42 -> "42 s"; 93600 -> "1 d 02 h"."""
    hours, rest = divmod(round(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours >= 24:
        return f"{hours // 24} d {hours % 24:02d} h"
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"
