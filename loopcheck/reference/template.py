"""`loopcheck init`: write the reference loop out as a standalone train.py.

The reference `train.py` imports only torch, numpy and the standard library, so the template
is that file, copied verbatim: one source, and what `init` writes is exactly what the tests run.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

SOURCE = Path(__file__).with_name("train.py")


def write_template(path: Path, *, force: bool, console: Console) -> int:
    """Write the template to `path` (a directory gets `train.py` inside it). Returns the exit
    code: 0 written, 1 the file exists and `force` is off, 2 it cannot be written."""
    target = path / "train.py" if path.is_dir() else path
    if target.exists() and not force:
        console.print(f"[red]error:[/] {target} already exists; use --force to overwrite it")
        return 1
    if target.exists() and not target.is_file():
        console.print(f"[red]error:[/] {target} exists and is not a file")
        return 2
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(SOURCE.read_text(encoding="utf-8"), encoding="utf-8")
    except OSError as exc:
        console.print(f"[red]error:[/] cannot write {target}: {exc.strerror or exc}")
        return 2
    console.print(
        f"wrote {target}: the reference training loop, standalone (torch and numpy only).\n"
        f"Replace the parts marked REPLACE: (the dataset and the model), then run "
        f"[bold]python {target} --epochs 10 --ckpt-dir runs/exp1[/]; run it again to resume."
    )
    return 0
