"""Command-line values the commands share, refused by argparse with a clear message (a usage
error, never a traceback or a busy loop later)."""

from __future__ import annotations

import argparse
import math


def seconds(text: str) -> float:
    """A duration above 0: 'nan' (a wait that returns at once, a busy loop) and 'inf' (an
    OverflowError in the wait) are refused too."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of seconds above 0")
    return value


def count(text: str) -> int:
    """A whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a count is 0 or more")
    return value


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: a port is from 1 to 65535")
    return value
