"""The layers only point down: `fermix_site` <- `providers`, `resources` <- `memory` <- `jobs` <- `api`,
and `console` beside them at the top. Every import of a project package, at module level or inside a
function, is read from the source and checked; imports inside functions are allowed only in an app's
`ready()` (Django's place for registering signals and checks)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

# What each package may import besides itself.
MAY_IMPORT = {
    "fermix_site": set(),
    "providers": {"fermix_site"},
    "resources": {"fermix_site"},
    "memory": {"fermix_site", "providers", "resources"},
    "jobs": {"fermix_site", "providers", "resources", "memory"},
    "api": {"fermix_site", "providers", "resources", "memory", "jobs"},
    "console": {"fermix_site", "providers", "resources", "memory", "jobs"},
}


def _modules(package: str):
    for path in sorted((ROOT / package).rglob("*.py")):
        if "migrations" not in path.parts:
            yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_a_package_imports_only_the_layers_below_it(package):
    upward = []
    for path, tree in _modules(package):
        for node in ast.walk(tree):
            for name in _imported(node):
                top = name.split(".")[0]
                if top in MAY_IMPORT and top != package and top not in MAY_IMPORT[package]:
                    upward.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert not upward, "\n".join(upward)


def _function_imports(tree: ast.AST) -> list[tuple[int, str, str]]:
    found = []
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                for name in _imported(node):
                    if name.split(".")[0] in MAY_IMPORT:
                        found.append((node.lineno, function.name, name))
    return found


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_no_project_import_hides_inside_a_function(package):
    hidden = [f"{path.relative_to(ROOT)}:{line} {function}() imports {name}"
              for path, tree in _modules(package) for line, function, name in _function_imports(tree)
              if not (path.name == "apps.py" and function == "ready")]
    assert not hidden, "\n".join(hidden)


def test_the_checks_above_would_see_an_upward_import(tmp_path):
    tree = ast.parse("def f():\n    from api.v1 import api\n")
    assert _function_imports(tree) == [(2, "f", "api.v1")]
    assert "api" not in MAY_IMPORT["fermix_site"]
