"""The dim-expression parser: arithmetic over dims evaluates; anything else is refused with a reason."""

from __future__ import annotations

import builtins

import pytest

from tasks.expr import MAX_LENGTH, ExprError, evaluate, names_in

DIMS = {"M": 8192, "N": 7168, "K": 5120, "D": 128}


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("cdiv(N,256)", 28),
        ("cdiv(M, 100)", 82),
        ("cdiv(M,128)", 64),
        ("M*N//128", 8192 * 7168 // 128),
        ("(M + 127) // 128", 64),
        ("M % 1000", 192),
        ("-K + 2*K", 5120),
        ("+D", 128),
        ("min(M, N, K)", 5120),
        ("max(1, cdiv(K, 64) - 100)", 1),
        ("  M  ", 8192),
        ("12", 12),
        (96, 96),
        (-3, -3),
    ],
)
def test_integer_expressions_evaluate(expr, value):
    result = evaluate(expr, DIMS)
    assert result == value
    assert isinstance(result, int)


@pytest.mark.parametrize(
    ("expr", "value"),
    [("1/sqrt(D)", 128**-0.5), ("rsqrt(D)", 128**-0.5), ("0.5 * D", 64.0), ("D / 4", 32.0), ("1.44269504", 1.44269504)],
)
def test_float_mode_takes_division_roots_and_decimals(expr, value):
    assert evaluate(expr, DIMS, floating=True) == pytest.approx(value)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        # attribute access, also as a call
        ("M.real", "Attribute is not allowed"),
        ("M.bit_length()", "only the functions cdiv, min, max may be called"),
        ("().__class__.__bases__", "Attribute is not allowed"),
        # dunder names and calls to anything but cdiv/min/max
        ("__import__('os').system('true')", "only the functions cdiv, min, max may be called"),
        ("__builtins__", "unknown dim '__builtins__'"),
        ("eval('1')", "only the functions cdiv, min, max may be called"),
        ("open('/etc/passwd')", "only the functions cdiv, min, max may be called"),
        ("abs(M)", "only the functions cdiv, min, max may be called"),
        ("max(M, key=N)", "only the functions cdiv, min, max may be called"),
        ("max(*[M, N])", "is not allowed"),
        # lambdas, subscripts, comprehensions, containers
        ("lambda: 1", "Lambda is not allowed"),
        ("(lambda x: x)(M)", "only the functions cdiv, min, max may be called"),
        ("[M, N][0]", "Subscript is not allowed"),
        ("[x for x in (1, 2)]", "ListComp is not allowed"),
        ("sum(x for x in (M,))", "only the functions"),
        ("{x: 1 for x in (M,)}", "DictComp is not allowed"),
        ("(M, N)", "Tuple is not allowed"),
        # strings and other non-numeric literals
        ("'M'", "literal 'M' is not a number"),
        ("f'{M}'", "JoinedStr is not allowed"),
        ("b'x'", "is not a number"),
        ("True", "literal True is not a number"),
        ("None", "literal None is not a number"),
        ("...", "is not a number"),
        ("1j", "is not a number"),
        ("1.5", "is not an integer"),
        ("1e3", "is not an integer"),
        # operators and control flow
        ("M**2", "operator '**' is not allowed"),
        ("2**64", "operator '**' is not allowed"),
        ("M / 2", "operator '/' is not allowed"),
        ("M << 3", "operator '<<' is not allowed"),
        ("M & 255", "operator '&' is not allowed"),
        ("~M", "UnaryOp is not allowed"),
        ("not M", "UnaryOp is not allowed"),
        ("M > N", "Compare is not allowed"),
        ("M and N", "BoolOp is not allowed"),
        ("M if N else K", "IfExp is not allowed"),
        ("(x := M)", "NamedExpr is not allowed"),
        # huge values
        ("99999999999999999999", "out of the 64-bit range"),
        ("M*M*M*M*M", "out of the 64-bit range"),
        ("-9223372036854775808 - 1", "out of the 64-bit range"),
        ("1" * (MAX_LENGTH + 1), f"longer than {MAX_LENGTH} characters"),
        # arity, zero division, unknown dims, syntax
        ("cdiv(M)", "cdiv takes 2 argument(s), got 1"),
        ("min()", "min takes one or more argument(s), got 0"),
        ("cdiv(M, 0)", "cdiv by zero"),
        ("M // (N - N)", "division by zero"),
        ("M % 0", "division by zero"),
        ("cdiv(Q, 128)", "unknown dim 'Q'; this task's dims: D, K, M, N"),
        ("cdiv(M,", "is not a valid expression"),
        ("M; N", "is not a valid expression"),
        ("M\0", "is not a valid expression"),
    ],
)
def test_anything_but_arithmetic_over_dims_is_refused(expr, message):
    with pytest.raises(ExprError) as refused:
        evaluate(expr, DIMS)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("value", "message"),
    [(True, "is a boolean"), (2.5, "is not an integer"), (10**30, "out of the 64-bit range"), ([1], "got list")],
)
def test_values_given_directly_are_checked_too(value, message):
    with pytest.raises(ExprError) as refused:
        evaluate(value, DIMS)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("expr", "message"),
    [("sqrt(-D)", "sqrt needs a positive argument"), ("rsqrt(0)", "rsqrt needs a positive argument"),
     ("1e300 * 1e300", "out of the 64-bit range"), ("D / 0.0", "division by zero"), ("float('nan')", "only")],
)  # fmt: skip
def test_float_mode_refusals(expr, message):
    with pytest.raises(ExprError) as refused:
        evaluate(expr, DIMS, floating=True)
    assert message in str(refused.value)


def test_evaluation_never_calls_eval_or_exec(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("eval/exec called")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    assert evaluate("cdiv(M, 128) * max(N, K)", DIMS) == 64 * 7168


def test_names_in_lists_dims_not_functions():
    assert names_in("cdiv(M, 128) + min(N, K)") == {"M", "N", "K"}
    assert names_in(128) == set()
    assert names_in("cdiv(M,") == set()
