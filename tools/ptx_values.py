"""The constant values a PTX kernel's registers hold, read from the text: what cross-checks need to know of the
descriptors and byte counts a kernel builds from immediates.

The reading is flow-insensitive: a register's values are those of all of its definitions, wherever they are, which
stays exact for the constant-building code descriptors come from and can only widen what is found elsewhere. A
value is a (high word, low word) pair, the low word None where it holds something unknown (a shared-memory
address); a register that is not built from constants has no values (None), never a guess.
"""

from __future__ import annotations

import re

from tools import ptx as ptx_text
from tools.ptx import Statement

MAX_VALUES = 64  # possible values a register may have before it counts as unknown
MAX_STEPS = 100_000  # register evaluations per kernel: beyond them (a hostile module), everything is unknown
MAX_DEPTH = 64  # definitions followed back from one operand (descriptor code takes a handful)
_INT = re.compile(r"^-?(?:0[xX][0-9a-fA-F]+|\d+)U?$")
# (hi, lo) of a 64-bit value; lo None where only the high word is known (an address in the low word).
Value = tuple[int, int | None]


class RegisterValues:
    """The values of one kernel body's registers, evaluated on demand and remembered."""

    def __init__(self, body: list[Statement]):
        self.defs = ptx_text.definitions(body)
        self.known: dict[str, frozenset[Value] | None] = {}  # registers evaluated whole
        self.assumed: dict[str, frozenset[Value]] = {}  # registers being evaluated: their values so far
        self.cut: list[str] = []  # the registers a cycle was cut at, in order
        self.steps = MAX_STEPS

    def constant(self, operand: str) -> int | None:
        """An operand's value when it is one known constant."""
        values = self.values(operand)
        if values is None or len(values) != 1:
            return None
        hi, lo = next(iter(values))
        return None if lo is None else (hi << 32) | lo

    def values(self, operand: str, seen: frozenset[str] = frozenset()) -> frozenset[Value] | None:
        """The possible (high word, low word) values of an operand over all of its definitions; the low word
        None where it holds something unknown (an address); None when even the high word is unknown. A register
        defined from itself (`or.b64 %rd2, %rd2, …`, hand-written code reuses registers) is iterated to a fixed
        point: what it holds along the way counts too, which can only widen what is found."""
        if _INT.match(operand):
            n = int(operand.rstrip("U"), 0) & (2**64 - 1)
            return frozenset({(n >> 32, n & 0xFFFFFFFF)})
        if not operand.startswith("%"):
            return None
        if operand in seen:  # a cycle: what the register is known to hold so far
            self.cut.append(operand)
            return self.assumed.get(operand, frozenset())
        if operand in self.known:
            return self.known[operand]
        definitions = self.defs.get(operand)
        if not definitions or len(seen) > MAX_DEPTH:
            return None
        cuts = len(self.cut)
        result: frozenset[Value] | None = frozenset()
        while result is not None:
            self.steps -= 1
            self.assumed[operand] = result
            grown: set[Value] | None = set(result)
            for d in definitions:
                got = self._evaluate(d, seen | {operand}) if self.steps >= 0 else None
                grown = None if got is None else grown | got
                if grown is None or len(grown) > MAX_VALUES:
                    grown = None
                    break
            if grown is not None and grown == result:
                break
            result = None if grown is None else frozenset(grown)
        del self.assumed[operand]
        if all(name == operand for name in self.cut[cuts:]):  # no cycle through an outer register was cut short
            self.known[operand] = result
        return result

    def _evaluate(self, d: Statement, seen: frozenset[str]) -> set[Value] | None:
        """The values one definition gives its destination, or None when it is not constant-building code."""
        op, args = d.opcode.split(".")[0], d.operands[1:]
        wide = ".b32" not in d.opcode and ".u32" not in d.opcode and ".s32" not in d.opcode
        mask = 2**64 - 1 if wide else 0xFFFFFFFF

        def of(i: int) -> frozenset[Value] | None:
            return self.values(args[i], seen) if i < len(args) else None

        if op == "mov" and len(args) == 1 and args[0].startswith("{"):  # mov.b64 %rd, {lo, hi}
            lo, hi = [*ptx_text.split_operands(args[0].strip("{}")), "", ""][:2]
            his, los = self.values(hi, seen), self.values(lo, seen)
            if his is None or any(h_lo is None for _, h_lo in his):
                return None
            low = next(iter(los))[1] if los is not None and len(los) == 1 else None
            return {(h_lo, low) for _, h_lo in his}
        if op == "mov" and len(args) == 1:
            return None if of(0) is None else set(of(0))
        if op == "cvt" and re.search(r"\.u64\.u(8|16|32)$", d.opcode):  # zero-extends: the high word is 0
            return {(0, lo) for _, lo in of(0)} if of(0) is not None else {(0, None)}
        if op in ("or", "and", "xor", "add") and len(args) == 2:
            a, b = of(0), of(1)
            if a is None or b is None:
                return None
            return {_mask(_combine(op, x, y), mask) for x in a for y in b}
        if op == "shr" and ".u64" in d.opcode and len(args) == 2 and (n := self.constant(args[1])) is not None:
            a = of(0)
            return None if a is None else {_shift_right(x, n) for x in a}
        if op == "shl" and len(args) == 2 and (n := self.constant(args[1])) is not None:
            a = of(0)
            if a is None or any(lo is None for _, lo in a):
                return None
            return {_split(((hi << 32 | lo) << n) & mask) for hi, lo in a}
        if op == "selp" and len(args) == 3:
            a, b = of(0), of(1)
            return None if a is None or b is None else set(a | b)
        return None


def _mask(x: Value, mask: int) -> Value:
    """A 32-bit operation's result: its high word is zero."""
    if mask == 2**64 - 1:
        return x
    return 0, None if x[1] is None else x[1] & mask


def _split(n: int) -> Value:
    return n >> 32, n & 0xFFFFFFFF


def _combine(op: str, x: Value, y: Value) -> Value:
    """x op y on (hi, lo) values. An add does not carry out of a low word it does not know: a descriptor's low
    word holds a 14-bit address and offset fields, which the small immediates added to it never overflow."""
    (xh, xl), (yh, yl) = x, y
    if xl is not None and yl is not None:
        a, b = xh << 32 | xl, yh << 32 | yl
        return _split({"or": a | b, "and": a & b, "xor": a ^ b, "add": (a + b) & (2**64 - 1)}[op])
    hi = {"or": xh | yh, "and": xh & yh, "xor": xh ^ yh, "add": (xh + yh) & 0xFFFFFFFF}[op]
    if op == "and" and (xl == 0 or yl == 0):
        return hi, 0
    return hi, None


def _shift_right(x: Value, n: int) -> Value:
    hi, lo = x
    if lo is not None:
        return _split((hi << 32 | lo) >> n)
    return hi >> n if n < 32 else 0, None
