"""Integer expressions over task dims (`cdiv(M,128)`), evaluated by walking a whitelisted syntax tree.

Python's parser only builds the tree; nothing is ever passed to `eval`. Allowed: integer literals,
dim names, `+ - * // %`, unary minus, and the calls `cdiv`, `min`, `max`. Float mode (for f32 scalars)
also allows decimal literals, `/`, `sqrt` and `rsqrt`.
"""

from __future__ import annotations

import ast
import math
import operator
import threading
from collections.abc import Callable, Mapping

MAX_LENGTH = 200
# CPython 3.11's parser is not safe to enter from several threads at once (a bench evaluates expressions in
# many): "AST constructor recursion depth mismatch". One parse at a time; they take microseconds.
PARSE_LOCK = threading.Lock()
MAX_MAGNITUDE = 2**63


class ExprError(ValueError):
    """An expression that is not allowed or cannot be evaluated; the message says why."""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


_INT_OPS: dict[type, Callable] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_FLOAT_OPS: dict[type, Callable] = {**_INT_OPS, ast.Div: operator.truediv}
_INT_CALLS: dict[str, tuple[Callable, int | None]] = {
    "cdiv": (_cdiv, 2),
    "min": (min, None),
    "max": (max, None),
}
_FLOAT_CALLS: dict[str, tuple[Callable, int | None]] = {
    **_INT_CALLS,
    "sqrt": (math.sqrt, 1),
    "rsqrt": (lambda x: 1.0 / math.sqrt(x), 1),
}
_OP_SYMBOL = {ast.Div: "/", ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
              ast.LShift: "<<", ast.RShift: ">>", ast.MatMult: "@"}  # fmt: skip


def evaluate(expr: int | float | str, dims: Mapping[str, int], *, floating: bool = False) -> int | float:
    """Value of `expr` with `dims` bound; raises ExprError with a message a model can act on."""
    if isinstance(expr, bool):
        raise ExprError(f"{expr!r} is a boolean, not a number")
    if isinstance(expr, int | float):
        if isinstance(expr, float) and not floating:
            raise ExprError(f"{expr!r} is not an integer")
        if not abs(expr) < MAX_MAGNITUDE:
            raise ExprError(f"value {expr} is out of the 64-bit range")
        return expr
    if not isinstance(expr, str):
        raise ExprError(f"expected a number or an expression string, got {type(expr).__name__}")
    if len(expr) > MAX_LENGTH:
        raise ExprError(f"expression longer than {MAX_LENGTH} characters")
    try:
        with PARSE_LOCK:
            tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"{expr!r} is not a valid expression ({e.msg})") from None
    walker = _Walker(dims, floating)
    value = walker.visit(tree.body)
    if not floating and not isinstance(value, int):
        raise ExprError(f"{expr!r} does not evaluate to an integer")
    return value


def names_in(expr: int | str) -> set[str]:
    """Dim names an expression mentions (for messages and validation without values)."""
    if not isinstance(expr, str):
        return set()
    try:
        with PARSE_LOCK:
            tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError:
        return set()
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - calls


class _Walker:
    def __init__(self, dims: Mapping[str, int], floating: bool):
        self.dims = dims
        self.ops = _FLOAT_OPS if floating else _INT_OPS
        self.calls = _FLOAT_CALLS if floating else _INT_CALLS
        self.floating = floating

    def visit(self, node: ast.AST) -> int | float:
        value = self._visit(node)
        if abs(value) >= MAX_MAGNITUDE:
            raise ExprError(f"value {value} is out of the 64-bit range")
        return value

    def _visit(self, node: ast.AST) -> int | float:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise ExprError(f"literal {node.value!r} is not a number")
            if isinstance(node.value, float) and not self.floating:
                raise ExprError(f"literal {node.value!r} is not an integer (only f32 scalars take decimals)")
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in self.dims:
                known = ", ".join(sorted(self.dims)) or "none"
                raise ExprError(f"unknown dim {node.id!r}; this task's dims: {known}")
            return self.dims[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = self.visit(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp):
            op = self.ops.get(type(node.op))
            if op is None:
                symbol = _OP_SYMBOL.get(type(node.op), type(node.op).__name__)
                allowed = "+ - * // % /" if self.floating else "+ - * // %"
                raise ExprError(f"operator {symbol!r} is not allowed; use {allowed}")
            left, right = self.visit(node.left), self.visit(node.right)
            if isinstance(node.op, ast.FloorDiv | ast.Mod | ast.Div) and right == 0:
                raise ExprError("division by zero")
            return op(left, right)
        if isinstance(node, ast.Call):
            return self._call(node)
        raise ExprError(f"{type(node).__name__} is not allowed in an expression; use numbers, dims, "
                        f"arithmetic and {', '.join(self.calls)}")  # fmt: skip

    def _call(self, node: ast.Call) -> int | float:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in self.calls or node.keywords:
            raise ExprError(f"only the functions {', '.join(self.calls)} may be called")
        fn, arity = self.calls[name]
        if (arity is not None and len(node.args) != arity) or not node.args:
            raise ExprError(f"{name} takes {arity or 'one or more'} argument(s), got {len(node.args)}")
        args = [self.visit(a) for a in node.args]
        if name == "cdiv" and args[1] == 0:
            raise ExprError("cdiv by zero")
        if name in ("sqrt", "rsqrt") and args[0] <= 0:
            raise ExprError(f"{name} needs a positive argument")
        return fn(*args)
