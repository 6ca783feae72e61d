"""tools/ptx_values.py on a hand-written kernel: constants built by mov, or, shl, shr and a {lo, hi} pack, an
address (a word that is not constant) kept apart from its known high word, a choice, a register that feeds
itself iterated to a fixed point, and what is not built from constants left unknown."""

from __future__ import annotations

import pytest

from tools import ptx
from tools.ptx_values import RegisterValues

KERNEL = """
.version 8.0
.target sm_90a
.address_size 64

.visible .entry k(.param .u64 p)
{
	.reg .b64 	%rd<12>;
	.reg .b32 	%r<10>;
	.reg .pred 	%p<2>;
	mov.b64 	%rd1, 0x4000000000000000;
	or.b64 	%rd2, %rd1, 16;
	shl.b64 	%rd3, %rd2, 4;
	shr.u64 	%rd4, %rd1, 62;
	mov.u32 	%r1, 5;
	mov.u32 	%r2, 7;
	mov.b64 	%rd5, {%r1, %r2};
	ld.param.u64 	%rd6, [p];
	add.s64 	%rd7, %rd6, 1;
	cvt.u32.u64 	%r3, %rd6;
	cvt.u64.u32 	%rd8, %r3;
	or.b64 	%rd9, %rd8, 0x4000000000000000;
	setp.eq.u64 	%p1, %rd6, 0;
	selp.b32 	%r4, 1, 2, %p1;
	mov.u32 	%r5, 1;
$L_double:
	shl.b32 	%r5, %r5, 1;
	mov.u32 	%r6, 0;
$L_count:
	add.u32 	%r6, %r6, 1;
	bra.uni 	$L_double;
}
"""


@pytest.fixture()
def registers() -> RegisterValues:
    return RegisterValues(ptx.bodies(KERNEL)["k"])


@pytest.mark.parametrize(
    ("register", "value"),
    [("%rd1", 1 << 62), ("%rd2", (1 << 62) | 16), ("%rd3", 0x100), ("%rd4", 1), ("%rd5", 7 << 32 | 5),
     ("0x20", 32), ("%rd7", None), ("%rd9", None), ("%r4", None), ("%r5", None), ("%r6", None)],
)  # fmt: skip
def test_a_constant_is_one_known_value(registers: RegisterValues, register: str, value: int | None) -> None:
    assert registers.constant(register) == value


def test_an_address_keeps_its_known_high_word(registers: RegisterValues) -> None:
    """A descriptor's swizzle bits sit in the high word, its low word holds a shared-memory address."""
    assert registers.values("%rd9") == {(1 << 30, None)}


def test_a_choice_has_both_values(registers: RegisterValues) -> None:
    assert registers.values("%r4") == {(0, 1), (0, 2)}


def test_a_register_that_feeds_itself_holds_every_value_along_the_way(registers: RegisterValues) -> None:
    # shl.b32 %r5, %r5, 1 after mov 1: each power of two, then 0 once the bit leaves the 32-bit word
    assert registers.values("%r5") == {(0, 1 << n) for n in range(32)} | {(0, 0)}


def test_more_values_than_the_limit_or_a_loaded_value_are_unknown(registers: RegisterValues) -> None:
    # add.u32 %r6, %r6, 1 counts through the whole 32-bit word, far past MAX_VALUES
    assert registers.values("%r6") is None and registers.values("%rd6") is None and registers.values("%rd7") is None
