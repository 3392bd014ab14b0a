"""The oldest PyTorch a project declares it runs on, read from its requirement files.

Looked up at the project root: `pyproject.toml`, `setup.py`, `setup.cfg` and `requirements*.txt`
(also under `requirements/`). Every requirement on `torch` found there is read
(`torch>=1.13`, `torch==2.1.0`, `"torch"`, poetry's `torch = "^2.1"`); the lowest version any of
them admits is the floor. A requirement without a lower bound admits every version. In `setup.py`
only strings that are items of a list, tuple or set count: a bare `"torch"` is as often the key
of a table of requirements (`deps_list("torch", "accelerate")`, `extras["torch"]`) as one itself.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
_SPEC = r"(?P<spec>(?:[<>=!~^]=?\s*[\w.*+-]+\s*,?\s*)*)"
_EXTRAS = r"(?:\[[\w,\s-]*\])?"
# a whole line that is a requirement on torch (requirements.txt, setup.cfg's install_requires)
_LINE = re.compile(rf"^\s*torch{_EXTRAS}\s*{_SPEC}\s*(?:[;#].*)?$", re.M)
# a quoted requirement string (pyproject's dependencies, setup.py's install_requires)
_QUOTED = re.compile(rf"[\"']torch{_EXTRAS}\s*{_SPEC}\s*(?:;[^\"']*)?[\"']")
# poetry: torch = "^2.1"
_POETRY = re.compile(r"^\s*torch\s*=\s*[\"'](?P<spec>[^\"']*)[\"']", re.M)
_PATTERNS = {".txt": (_LINE,), ".cfg": (_LINE,), ".toml": (_QUOTED, _POETRY)}  # setup.py: `_listed_specs`
_CLAUSE = re.compile(r"([<>=!~^]=?)\s*(\d+(?:\.\d+)*)")
# one requirement string on torch, whole (an item of setup.py's lists)
_REQUIREMENT = re.compile(rf"\s*torch{_EXTRAS}\s*{_SPEC}\s*(?:;.*)?", re.S)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:2])


def _floor_of(spec: str) -> tuple[int, ...]:
    """The lowest version one requirement admits ((0,) when it has no lower bound)."""
    floor: tuple[int, ...] = (0,)
    for op, version in _CLAUSE.findall(spec):
        if op in (">=", "==", "~=", "^", ">", "===", "~"):
            floor = max(floor, _version(version))
    return floor


def _requirement_files(root: Path) -> list[Path]:
    found = [root / name for name in _FILES if (root / name).is_file()]
    found += sorted(root.glob("requirements*.txt"))
    if (root / "requirements").is_dir():
        found += sorted((root / "requirements").glob("*.txt"))
    return found


@lru_cache(maxsize=64)
def declared_floor(root: Path) -> tuple[int, ...] | None:
    """The lowest torch version the project at `root` declares it accepts; None when it declares
    no requirement on torch at all."""
    floors: list[tuple[int, ...]] = []
    for path in _requirement_files(root):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if path.suffix == ".py":
            floors.extend(_floor_of(spec) for spec in _listed_specs(text))
            continue
        for pattern in _PATTERNS.get(path.suffix, ()):
            floors.extend(_floor_of(m.group("spec") or "") for m in pattern.finditer(text))
    return min(floors) if floors else None


def _listed_specs(source: str) -> list[str]:
    """The version specifiers of the torch requirements a `setup.py` lists (strings that are items
    of a list, tuple or set); every quoted one when the file does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return [m.group("spec") or "" for m in _QUOTED.finditer(source)]
    specs = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            for item in node.elts:
                if isinstance(item, ast.Constant) and isinstance(item.value, str):
                    found = _REQUIREMENT.fullmatch(item.value)
                    if found:
                        specs.append(found.group("spec") or "")
    return specs


def floor_text(floor: tuple[int, ...]) -> str:
    return "any version" if floor == (0,) else ">= " + ".".join(map(str, floor))
