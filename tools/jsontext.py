"""JSON that someone else wrote (a model's launch spec, a scripted fixture), read with limits so that no text
can crash the reader: a nesting depth (json recurses once per level) and a length for numbers (Python refuses
to read integers of more than 4,300 digits, and prints none longer either)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 32
MAX_DIGITS = 40  # any 64-bit value has at most 20
# Strings first, so that brackets inside them are not counted; both alternatives are linear.
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)


class JsonRefused(ValueError):
    """Text that is not JSON we accept; the message says what and where."""


def loads(text: str) -> Any:
    """json.loads, refusing nesting deeper than MAX_DEPTH, numbers longer than MAX_DIGITS digits, numbers that
    overflow to infinity, and NaN/Infinity (not JSON); json.JSONDecodeError for text that is not JSON."""
    depth = 0
    for m in _STRING_OR_BRACKET.finditer(text):
        if m.group() in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                line = text.count("\n", 0, m.start()) + 1
                raise JsonRefused(f"nested deeper than {MAX_DEPTH} levels (at line {line})")
        elif m.group() in "]}":
            depth -= 1
    return parse(text, MAX_DIGITS)


def parse(text: str, max_digits: int) -> Any:
    """json.loads with loads' number guards at `max_digits`, and nesting past Python's recursion limit refused;
    no depth scan, which costs seconds on tens of megabytes: for a reader whose schema has a fixed depth and
    bounds each number itself, naming the field (the service's request bodies)."""

    def integer(digits: str) -> int:
        count = len(digits.lstrip("-"))
        if count > max_digits:
            raise JsonRefused(f"an integer of {count:,} digits; numbers here have at most {max_digits}")
        return int(digits)

    try:
        return json.loads(text, parse_int=integer, parse_float=_number, parse_constant=_constant)
    except RecursionError:
        raise JsonRefused("nested too deep") from None


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"the number {text[:40]} is out of range")
    return value


def _constant(name: str) -> float:
    raise JsonRefused(f"{name} is not a JSON value")
