"""The library (everything under ring/ but the study tools) stands alone: it imports no study
tool, and ``import ring`` needs NumPy only."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent
# The study tools, and the console scripts that start them (ring._scripts).
TOOLS_LAYER = ("bench", "model", "nsys", "report", "study")
TOOLS = (*TOOLS_LAYER, "_scripts")


def _library_files() -> list[Path]:
    ring = ROOT / "ring"
    return [
        path
        for path in sorted(ring.rglob("*.py"))
        if path.relative_to(ring).with_suffix("").parts[0] not in TOOLS
    ]


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (functions too), as an absolute name."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def test_the_library_imports_no_study_tool():
    files = _library_files()
    assert any(path.name == "api.py" for path in files)
    assert not any("bench" in path.parts for path in files)
    tools = tuple(f"ring.{tool}" for tool in TOOLS)
    crossing = sorted(
        (path.relative_to(ROOT).as_posix(), module)
        for path in files
        for module in _imports(path)
        if module in tools or module.startswith(tuple(f"{tool}." for tool in tools))
    )
    assert crossing == []


def test_the_console_scripts_name_their_tools_where_the_boundary_sees_them():
    """ring._scripts loads each tool by name as its script starts (so a missing extra is
    said in one line): its table names only study tools, and no library module names
    one in a string either."""
    from ring._scripts import TOOLS

    assert {module.split(".")[1] for module in TOOLS.values()} <= set(TOOLS_LAYER)
    tools = tuple(f"ring.{tool}" for tool in TOOLS_LAYER)
    named = sorted(
        (path.relative_to(ROOT).as_posix(), node.value)
        for path in _library_files()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith(tools)
    )
    assert named == []
