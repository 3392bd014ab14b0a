"""flake8 plugin: `flake8 --select LC` runs loopcheck's lint rules on each file flake8 checks.

The file is checked as `loopcheck lint` checks it: calls are followed into the project's own
modules (never into environments or installed packages), and only findings located in the file
itself are reported. flake8 owns selection and `# noqa` here: the plugin reports every loopcheck
finding located in the file, as `(line, column, "LC102 message", type)`, with loopcheck's own suppression comments
switched off, and flake8 filters them (so `--disable-noqa` and `--extend-ignore` work as usual). Files flake8
cannot parse get flake8's own E999, so loopcheck's parse errors are not repeated.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Iterator

from loopcheck import __version__


def _is_lint_code(code: str) -> bool:
    return code.startswith("LC") and not code.startswith("LC0")


def _same_file(a: str | None, b: str) -> bool:
    if a is None or a == b:
        return True
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


class LoopcheckChecker:
    name = "loopcheck"
    version = __version__

    def __init__(self, tree: ast.AST, filename: str, lines: list[str]) -> None:
        # flake8 hands over the ast tree too; loopcheck parses with libcst from the lines.
        self.filename = filename
        self.lines = lines

    def run(self) -> Iterator[tuple[int, int, str, Any]]:
        from loopcheck.lint import suppress
        from loopcheck.lint.engine import check_source, project_for

        source = "".join(self.lines)
        project = None if self.filename in ("-", "stdin") else project_for(self.filename)
        with suppress.disabled():
            # flake8 hands over the file as it is on disk: the files importing it count too
            result = check_source(source, self.filename, enabled=_is_lint_code, project=project,
                                  on_disk=project is not None)
        for f in result.findings:
            if not _same_file(f.path, self.filename):
                continue  # an event inlined from another module: reported when that file is linted
            yield (f.line or 1, max((f.column or 1) - 1, 0), f"{f.code} {f.message}", type(self))
