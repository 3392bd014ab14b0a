"""`loopcheck server`: a Language Server Protocol server over stdio, for editors.

It shows `loopcheck lint` findings as diagnostics while a file is edited, offers their fixes and
`# noqa` comments as code actions, and shows a rule's page on hover. It needs the `server` extra
(pygls); `missing_dependency()` says so before anything imports it.

Modules: `checks` (the one place that calls the lint engine), `settings` (client settings and the
pyproject.toml configuration of each file), `convert` (findings and edits to LSP positions),
`actions` (code actions), `hover` (rule pages), `notebooks` (cells linted as one module),
`reparse` (an edited buffer parsed again only where it changed), `stdio` (the event loop reading
stdin) and `app` (the pygls wiring: documents, debouncing, publishing).
"""

from __future__ import annotations

INSTALL_HINT = "pip install 'loopcheck[server]'"


def missing_dependency() -> str | None:
    """A one-line message when the language server library is not installed, else None."""
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError as exc:
        return f"`loopcheck server` needs the pygls package ({exc.name or 'pygls'} is missing): {INSTALL_HINT}"
    return None
