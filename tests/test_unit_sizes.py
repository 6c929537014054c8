"""Units in ring/ stay readable in one sitting.

A function or method fits on one screen: at most 80 lines, decorators included. A longer one
is split by topic; there is no allow-list.

A module holds one concept. No count of lines measures that: a line limit on modules makes
them split where they reach it, by size rather than by topic, so there is none. What a test
can check is the two marks such splits and grab-bags leave:
- the module opens with a docstring, which names its concept (what a reader meets first);
- its name names a concept: not a number or a continuation (``fit2``, ``report_part_b``,
  ``costs_more``) nor a bin for what has no other place (``utils``, ``misc``, ``helpers``).
Whether the docstring's concept is one is left to review; these checks only keep the
mechanical ways around it out."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ring"
MAX_FUNCTION_LINES = 80
# Words of a module's name that say where it was cut or that it holds leftovers, not a concept.
SPLIT_WORDS = {"part", "more", "extra", "rest", "continued", "cont", "other", "others"}
BIN_WORDS = {"util", "utils", "misc", "helpers", "helper", "common", "stuff"}
NUMBERED = re.compile(r"\d+$|^(a|b|c)$")


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


def name_problem(path: Path) -> str | None:
    """Why a module's (or its package's) name names no concept, or None."""
    stem = path.parent.name if path.stem == "__init__" else path.stem
    for word in stem.strip("_").split("_"):
        if NUMBERED.search(word):
            return f"{word!r} numbers a piece"
        if word in SPLIT_WORDS:
            return f"{word!r} names a cut, not a concept"
        if word in BIN_WORDS:
            return f"{word!r} names a bin, not a concept"
    return None


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


def test_the_name_rule_refuses_numbered_cut_and_bin_names_only():
    refused = ["fit2.py", "report_part_b.py", "costs_more.py", "utils.py", "gpu_misc.py"]
    refused += ["schedule_2.py", "helpers/__init__.py", "mpi_rest.py"]
    kept = ["fit.py", "cost_model_figure.py", "seed_cpp/__init__.py", "__main__.py", "_optional.py"]
    kept += ["nvtx_ranges.py", "gpu_kernels.py", "schedule_core.py", "by_position.py"]
    assert [p for p in refused if name_problem(Path("ring") / p) is None] == []
    assert {p: name_problem(Path("ring") / p) for p in kept} == dict.fromkeys(kept)


def test_every_module_in_ring_opens_with_the_docstring_naming_its_concept():
    missing = [_relative(p) for p in _modules() if not ast.get_docstring(ast.parse(p.read_text()))]
    assert not missing, f"say in a docstring what each of these holds: {missing}"


def test_every_module_in_ring_is_named_for_a_concept():
    offenders = {_relative(p): why for p in _modules() if (why := name_problem(p)) is not None}
    assert not offenders, f"name these for what they hold: {offenders}"
