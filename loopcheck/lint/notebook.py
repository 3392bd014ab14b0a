"""Jupyter notebooks for the linter: the code cells joined into one script, positions mapped back.

The code cells are concatenated in order (a notebook runs top to bottom, so a loop in one cell
and the optimizer built in another are one program). IPython syntax that is not Python is
replaced by `pass` at the same indentation, so blocks stay valid and line numbers stay put:
line magics (`%time`, `%matplotlib inline`), shell escapes (`!pip install`), help (`obj?`),
assignments from them (`files = !ls`), and cell magics (`%%bash`: the whole cell; `%%time` and
the other magics whose body is Python: only their first line).

Findings and errors are reported at a cell (its number among all the notebook's cells, as a
notebook shows them from the top, starting at 1) and a line inside that cell. `--fix` does not
rewrite notebooks: their findings carry no fix.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from loopcheck.findings import Finding

SUFFIX = ".ipynb"
_PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "memit"})
_MAGIC = re.compile(r"^\s*(?:[%!?]|[\w.]+\?{1,2}\s*$|[\w.,\s\[\]]+?=\s*[%!])")


class NotebookError(ValueError):
    """A notebook that cannot be read as one (not JSON, not nbformat 4)."""


@dataclass
class Notebook:
    path: str
    source: str  # the code cells, joined
    where: list[tuple[int, int]] = field(default_factory=list)  # line of `source` - 1 -> (cell, line in cell)
    cells: dict[int, list[str]] = field(default_factory=dict)  # cell number -> its lines as written

    def position(self, line: int | None) -> tuple[int | None, int | None]:
        """(cell, line in that cell) of a line of the joined source."""
        if line is None or not self.where:
            return None, line
        return self.where[min(max(line, 1), len(self.where)) - 1]

    def locate(self, finding: Finding) -> Finding:
        """A finding of the joined source, moved to its cell (the fix dropped: notebooks are not rewritten)."""
        cell, line = self.position(finding.line)
        end_cell, end_line = self.position(finding.end_line)
        if end_cell != cell:
            end_line, end_column = line, None
        else:
            end_column = finding.end_column
        extra = {**finding.extra, "cell": cell, **({"fixable": True} if finding.fix else {})}
        return finding.with_(line=line, end_line=end_line, end_column=end_column, fix=None, extra=extra)


def is_notebook(path: str | Path) -> bool:
    return str(path).endswith(SUFFIX)


def _cell_lines(cell: dict[str, Any]) -> list[str]:
    raw = cell.get("source", "")
    text = "".join(raw) if isinstance(raw, list) else str(raw)
    return text.splitlines()


def _python_lines(lines: list[str]) -> list[str]:
    """The lines of one code cell with IPython syntax replaced by `pass`."""
    out = list(lines)
    first = next((i for i, line in enumerate(out) if line.strip()), None)
    if first is not None and out[first].lstrip().startswith("%%"):
        name = out[first].lstrip()[2:].split(maxsplit=1)[0] if out[first].strip() != "%%" else ""
        stop = first + 1 if name in _PYTHON_CELL_MAGICS else len(out)
        for i in range(first, stop):
            out[i] = ""
    for i, line in enumerate(out):
        if _MAGIC.match(line) and not line.lstrip().startswith("#"):
            indent = line[: len(line) - len(line.lstrip())]
            out[i] = f"{indent}pass"
    return out


def parse(data: bytes | str, path: str) -> Notebook:
    """The notebook's code cells as one script; NotebookError when it is not a notebook."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise NotebookError(f"not a notebook: invalid JSON ({exc})") from None
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list):
        raise NotebookError("not a notebook: no `cells` list (nbformat 4 is read)")
    book = Notebook(path, "")
    parts: list[str] = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        lines = _cell_lines(cell)
        book.cells[number] = lines
        for index, line in enumerate(_python_lines(lines), start=1):
            parts.append(line)
            book.where.append((number, index))
    book.source = "\n".join(parts) + ("\n" if parts else "")
    return book


def check(path: str, data: bytes, *, enabled: Callable[[str], bool], project: Any) -> Any:
    """The engine's result for a notebook, its findings and errors placed in cells."""
    from loopcheck.lint.engine import FileResult, LintError, check_source

    try:
        book = parse(data, path)
    except NotebookError as exc:
        return FileResult(path, errors=[LintError(path, None, str(exc))])
    result = check_source(book.source, path, enabled=enabled, project=project)
    same = Path(path).resolve()
    result.findings = [
        book.locate(f) if f.path is None or Path(f.path).resolve() == same else f for f in result.findings
    ]
    for error in result.errors:
        if error.line is not None:
            error.cell, error.line = book.position(error.line)  # type: ignore[attr-defined]
    return result


def cell_lines(path: str | Path, cell: int) -> list[str]:
    """The lines of one cell as written (for the text report's snippets)."""
    try:
        return parse(Path(path).read_bytes(), str(path)).cells.get(cell, [])
    except (OSError, NotebookError):
        return []
