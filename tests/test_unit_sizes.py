"""Units in ring/ stay small enough to read in one sitting: no function or method over 80
lines, no module over 400. A long unit is split by topic; there is no allow-list."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ring"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 400


def long_functions(source: str, limit: int) -> dict[str, int]:
    """Qualified name -> lines (decorators included) of every function longer than ``limit``."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    lines = (child.end_lineno or child.lineno) - first + 1
                    if lines > limit:
                        found[name] = lines
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_measure_finds_a_long_method_and_a_long_nested_function():
    def body(indent: str) -> list[str]:
        return [f"{indent}x{i} = {i}" for i in range(80)]

    lines = ["class A:", "    @staticmethod", "    def long():", *body(" " * 8)]
    lines += ["def outer():", "    def inner():", *body(" " * 8), "    return inner"]
    lines += ["def short():", "    return 1"]
    found = long_functions("\n".join(lines), MAX_FUNCTION_LINES)
    assert found == {"A.long": 82, "outer": 83, "outer.inner": 81}


def test_no_function_in_ring_is_over_80_lines():
    offenders = {
        f"{_relative(path)}:{name}": lines
        for path in _modules()
        for name, lines in long_functions(path.read_text(), MAX_FUNCTION_LINES).items()
    }
    assert not offenders, f"split these by topic (lines > {MAX_FUNCTION_LINES}): {offenders}"


def test_no_module_in_ring_is_over_400_lines():
    offenders = {
        _relative(path): lines
        for path in _modules()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not offenders, f"split these by topic (lines > {MAX_MODULE_LINES}): {offenders}"
