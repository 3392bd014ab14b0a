"""The pygls wiring: open documents, debounced checks, diagnostics, code actions, hover.

A document is checked when it is opened and saved (at once) and after each change (once the
edits pause for `debounce` milliseconds). Checks run one at a time on a worker thread, so the
server keeps answering while a long file is analysed, and the worker publishes what it found; a
result for a text that has changed since is dropped, and the newer text's check publishes
instead. Saving any file checks every open document again, as they may import it; saving a
configuration file does the same. A notebook is checked as a whole (its code cells as one
module) and each cell gets its own diagnostics.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import threading
from urllib.parse import unquote
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from loopcheck import __version__
from loopcheck.errors import ConfigError
from loopcheck.findings import Finding
from loopcheck.lint.output import FileError
from loopcheck.server import actions, checks, notebooks
from loopcheck.server.convert import Positions, contains, diagnostic, error_diagnostic, message_diagnostic, overlaps
from loopcheck.server.hover import code_in_comment, hover, rule_markdown
from loopcheck.server.settings import CONFIG_FILES, Configurations, Settings

T = TypeVar("T")

log = logging.getLogger("loopcheck.server")

_GC_THRESHOLD = 50_000  # allocations between two collections of the youngest generation


@dataclass
class Checked:
    """The result of checking one version of a document."""

    version: int | None
    text: str
    findings: list[Finding] = field(default_factory=list)
    diagnostics: list[types.Diagnostic] = field(default_factory=list)  # findings' first, in order


def _path(document: TextDocument) -> Path | None:
    if not document.uri.startswith("file:"):
        return None
    path = to_fs_path(document.uri)
    return Path(path) if path else None


def _is_python(document: TextDocument) -> bool:
    if document.language_id:
        return document.language_id == "python"
    return document.uri.endswith((".py", ".pyi"))


class LoopcheckServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "loopcheck",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=types.NotebookDocumentSyncOptions(
                notebook_selector=[types.NotebookDocumentFilterWithCells(cells=[types.NotebookCellLanguage(language="python")])],
                save=True,
            ),
        )
        self.root = Path.cwd()
        self.settings = Settings()
        self.settings_error: str | None = None
        self.configs = Configurations(self.settings, self.root)
        self.checked: dict[str, Checked] = {}
        self.pending: dict[str, asyncio.Task] = {}
        # one check at a time: the engine's caches are not meant to be shared between threads
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="loopcheck-check")
        # A document's diagnostics are published by the check that found them, on the worker
        # (a hand-off back to the event loop first costs a wait for a core on a busy machine).
        # Each request to publish has a number; a newer request, or closing the document,
        # makes an older one's result stale. `publishing` is held while a result is found
        # current and sent, and while a closed document's diagnostics are cleared.
        self.publishing = threading.Lock()
        self.requests: dict[str, int] = {}
        self._requested = itertools.count(1)

    # -- settings ------------------------------------------------------------------------------

    def apply_settings(self, raw: Any) -> None:
        try:
            self.settings = Settings.from_client(raw, self.root)
            self.settings_error = None
        except ConfigError as exc:
            self.settings, self.settings_error = Settings(), str(exc)
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=f"loopcheck: {exc}"))
        self.configs = Configurations(self.settings, self.root)

    # -- checking ------------------------------------------------------------------------------

    def document(self, uri: str) -> TextDocument | None:
        """An open document (the workspace keys them by their unquoted URI)."""
        return self.workspace.text_documents.get(unquote(uri))

    async def on_worker(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.worker, fn, *args)

    def _diagnose(self, path: Path | None, text: str) -> checks.Diagnosis | str | None:
        """What the engine says about a text: a Diagnosis, a configuration problem (str), or
        None for an excluded file."""
        if self.settings_error is not None:
            return self.settings_error
        try:
            config = self.configs.for_path(path)
        except ConfigError as exc:
            return str(exc)
        if self.configs.excluded(config, path):
            return None
        return checks.diagnose(path, text, config)

    @staticmethod
    def _checked(document: TextDocument, outcome: "tuple[list[Finding], list[FileError]] | str | None") -> Checked:
        positions = Positions(document.lines, document.position_codec)
        result = Checked(document.version, document.source)
        if isinstance(outcome, str):
            result.diagnostics = [message_diagnostic(f"loopcheck configuration: {outcome}")]
        elif outcome is not None:
            findings, errors = outcome
            result.findings = findings
            result.diagnostics = [diagnostic(f, positions) for f in findings]
            result.diagnostics += [error_diagnostic(e, positions) for e in errors]
        return result

    def _unchanged(self, uri: str, version: int | None, text: str) -> TextDocument | None:
        document = self.document(uri)
        if document is None or document.version != version or document.source != text:
            return None
        return document

    def _fix_all(self, path: Path | None, text: str, unsafe: bool) -> str | None:
        """The text with the file's fixes applied (None when its configuration is broken)."""
        try:
            config = self.configs.for_path(path)
        except ConfigError:
            return None
        return checks.fix_all(path, text, config, unsafe=unsafe)

    async def check(self, uri: str, request: int | None = None) -> Checked | None:
        """Check the document's current text; None when it changed or closed meanwhile.
        `request`: the number of the request to publish the result, published at once while
        it is the document's latest. A notebook cell is checked with its notebook."""
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        if notebook is not None:
            return (await self.check_notebook(notebook.uri) or {}).get(uri)
        document = self.document(uri)
        if document is None or not _is_python(document):
            return None
        return await self.on_worker(self._check_text, uri, document.version, document.source, _path(document), request)

    def _check_text(self, uri: str, version: int | None, text: str, path: Path | None,
                    request: int | None) -> Checked | None:
        """On the worker: check one version of a document, publish the result when asked."""
        outcome = self._diagnose(path, text)
        if isinstance(outcome, checks.Diagnosis):
            outcome = (outcome.findings, outcome.errors)
        with self.publishing:
            document = self._unchanged(uri, version, text)
            if document is None:
                return None
            result = self.checked[uri] = self._checked(document, outcome)
            if request is not None and self.requests.get(uri) == request:
                self._send(uri, result)
        return result

    def _send(self, uri: str, result: Checked) -> None:
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=result.diagnostics, version=result.version)
        )

    async def check_notebook(self, uri: str) -> dict[str, Checked] | None:
        """Check a notebook's code cells as one module; each cell's result, or None when a cell
        changed meanwhile."""
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is None:
            return None
        snapshot = []
        for cell in notebook.cells:
            document = self.document(cell.document)
            if cell.kind == types.NotebookCellKind.Code and document is not None and _is_python(document):
                snapshot.append((cell.document, document.version, document.source))
        source, cells = notebooks.module_source(snapshot)
        path = Path(to_fs_path(uri)) if uri.startswith("file:") else None
        outcome = await self.on_worker(self._diagnose, path, source)
        documents = [self._unchanged(c.uri, c.version, c.text) for c in cells]
        if any(d is None for d in documents):
            return None
        parts = notebooks.split(cells, outcome.findings, outcome.errors) if isinstance(outcome, checks.Diagnosis) else None
        results = {}
        for cell, document in zip(cells, documents):
            results[cell.uri] = self._checked(document, parts[cell.uri] if parts is not None else outcome)
        self.checked.update(results)
        return results

    async def publish(self, uri: str, delay: float = 0.0, request: int | None = None) -> None:
        """Check a document (or a notebook) and publish its diagnostics (each cell's)."""
        if delay:
            await asyncio.sleep(delay)
        workspace = self.workspace
        notebook = workspace.get_notebook_document(notebook_uri=uri) or workspace.get_notebook_document(cell_uri=uri)
        if notebook is None:
            await self.check(uri, request)  # published by the check
            return
        for target, result in (await self.check_notebook(notebook.uri) or {}).items():
            self._send(target, result)

    def schedule(self, uri: str, *, debounce: bool = False) -> None:
        """Check a document soon; a newer request replaces one that has not finished."""
        with self.publishing:
            self.forget(uri, keep_result=True)
            request = self.requests[uri] = next(self._requested)
        delay = self.settings.debounce_ms / 1000 if debounce else 0.0
        task = asyncio.ensure_future(self.publish(uri, delay, request))
        self.pending[uri] = task
        task.add_done_callback(lambda t, uri=uri: self._done(uri, t))

    def _done(self, uri: str, task: asyncio.Task) -> None:
        if self.pending.get(uri) is task:
            del self.pending[uri]
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            log.error("checking %s failed: %s: %s", uri, type(exc).__name__, exc)
            self.window_log_message(types.LogMessageParams(
                type=types.MessageType.Error, message=f"loopcheck: checking {uri} failed: {type(exc).__name__}: {exc}"))

    def schedule_all(self) -> None:
        for document in list(self.workspace.text_documents.values()):
            if self.workspace.get_notebook_document(cell_uri=document.uri) is None:
                self.schedule(document.uri)
        for notebook in list(self.workspace.notebook_documents.values()):
            self.schedule(notebook.uri)

    def recheck_all(self) -> None:
        """Check every open document again after files changed on disk."""
        self.worker.submit(checks.forget_imports)  # on the worker: never while a check runs
        self.schedule_all()

    async def current(self, uri: str) -> Checked | None:
        """The check of the document's current version (checked now when it is not yet)."""
        document = self.document(uri)
        if document is None:
            return None
        result = self.checked.get(uri)
        if result is not None and result.version == document.version and result.text == document.source:
            return result
        return await self.check(uri)

    def forget(self, uri: str, *, keep_result: bool = False) -> None:
        """Cancel the document's pending check (a running one publishes nothing)."""
        self.requests.pop(uri, None)
        task = self.pending.pop(uri, None)
        if task is not None:
            task.cancel()
        if not keep_result:
            self.checked.pop(uri, None)

    # -- code actions and hover ----------------------------------------------------------------

    def _versioned_edits(self) -> bool:
        caps = self.client_capabilities.workspace
        edit = caps.workspace_edit if caps else None
        return bool(edit and edit.document_changes)

    async def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        result = await self.current(uri)
        if result is None:
            return []
        document = self.document(uri)
        positions = Positions(document.lines, document.position_codec)
        only = params.context.only
        versioned = self._versioned_edits()

        def edit_of(edits: list[types.TextEdit]) -> types.WorkspaceEdit:
            return actions.workspace_edit(uri, result.version, edits, versioned)

        out: list[types.CodeAction] = []
        if actions.wanted(types.CodeActionKind.QuickFix, only):
            for finding, diag in zip(result.findings, result.diagnostics):
                if not overlaps(diag.range, params.range):
                    continue
                edits = actions.fix_edits(finding, positions)
                if edits:
                    out.append(actions.fix_action(finding, diag, edit_of(edits)))
                noqa = actions.noqa_edit(result.text, finding.line or 1, finding.code)
                if noqa is not None:
                    out.append(actions.noqa_action(finding, diag, edit_of([positions.text_edit(noqa)])))
        in_notebook = self.workspace.get_notebook_document(cell_uri=uri) is not None
        if not in_notebook and actions.wanted(actions.FIX_ALL, only) and any(
            (f.fix or {}).get("applicability") in self._fix_kinds() for f in result.findings
        ):
            unsafe = self.settings.unsafe_fixes
            fixed = await self.on_worker(self._fix_all, _path(document), result.text, unsafe)
            now = self.document(uri)
            if fixed is not None and fixed != result.text and now is not None and now.version == result.version:
                edits = actions.text_edits_between(result.text, fixed, positions)
                out.append(actions.fix_all_action(edit_of(edits), unsafe))
        return out

    def _fix_kinds(self) -> set[str]:
        return {"safe", "unsafe"} if self.settings.unsafe_fixes else {"safe"}

    async def hover(self, params: types.HoverParams) -> types.Hover | None:
        uri = params.text_document.uri
        document = self.document(uri)
        if document is None or not _is_python(document):
            return None
        result = self.checked.get(uri)
        if result is not None and result.version == document.version:
            for finding, diag in zip(result.findings, result.diagnostics):
                if contains(diag.range, params.position):
                    text = rule_markdown(finding.code, finding)
                    if text is not None:
                        return hover(text, diag.range)
        positions = Positions(document.lines, document.position_codec)
        line, column = positions.server_position(params.position)
        if line > len(document.lines):
            return None
        named = code_in_comment(document.lines[line - 1].rstrip("\r\n"), column)
        if named is None:
            return None
        code, start, end = named
        return hover(rule_markdown(code) or "", positions.range(line, start, line, end))


def _config_file(uri: str) -> bool:
    return uri.rsplit("/", 1)[-1] in CONFIG_FILES


def build() -> LoopcheckServer:
    server = LoopcheckServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: LoopcheckServer, params: types.InitializeParams) -> None:
        root = ls.workspace.root_path
        if root:
            ls.root = Path(root)
        ls.apply_settings(params.initialization_options)

    @server.feature(types.INITIALIZED)
    def initialized(ls: LoopcheckServer, params: types.InitializedParams) -> None:
        # files changed outside the editor (a branch switch, a pyproject.toml edited elsewhere)
        # are announced by the client when it can watch them for us
        caps = ls.client_capabilities.workspace
        watched = caps.did_change_watched_files if caps else None
        if watched and watched.dynamic_registration:
            watchers = [types.FileSystemWatcher(glob_pattern=f"**/{name}") for name in (*CONFIG_FILES, "*.py")]
            ls.client_register_capability(types.RegistrationParams(registrations=[types.Registration(
                id="loopcheck-watched-files",
                method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=watchers),
            )]))

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: LoopcheckServer, params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if isinstance(settings, dict) and "loopcheck" in settings:
            ls.apply_settings(settings["loopcheck"])
            ls.schedule_all()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: LoopcheckServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: LoopcheckServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri, debounce=True)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: LoopcheckServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.recheck_all()  # the saved file may be imported by the others (a new one, even), or configure them

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched(ls: LoopcheckServer, params: types.DidChangeWatchedFilesParams) -> None:
        if any(_config_file(change.uri) or change.uri.endswith(".py") for change in params.changes):
            ls.recheck_all()

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: LoopcheckServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        last = ls.checked.get(uri)
        with ls.publishing:  # a check running now finds the document gone, or is cleared here
            ls.forget(uri)
            ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        path = to_fs_path(uri) if uri.startswith("file:") else None
        if last is not None and path:
            ls.worker.submit(checks.closed, Path(path))  # the others see the file on disk again
            ls.schedule_all()

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_did_open(ls: LoopcheckServer, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.schedule(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_did_change(ls: LoopcheckServer, params: types.DidChangeNotebookDocumentParams) -> None:
        ls.schedule(params.notebook_document.uri, debounce=True)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_did_save(ls: LoopcheckServer, params: types.DidSaveNotebookDocumentParams) -> None:
        ls.recheck_all()

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_did_close(ls: LoopcheckServer, params: types.DidCloseNotebookDocumentParams) -> None:
        ls.forget(params.notebook_document.uri)
        for cell in params.cell_text_documents:
            ls.forget(cell.uri)
            ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=cell.uri, diagnostics=[]))

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, actions.FIX_ALL]),
    )
    async def code_action(ls: LoopcheckServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return await ls.code_actions(params)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def on_hover(ls: LoopcheckServer, params: types.HoverParams) -> types.Hover | None:
        return await ls.hover(params)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: LoopcheckServer, params: Any = None) -> None:
        for uri in list(ls.pending):
            ls.forget(uri)
        ls.worker.shutdown(wait=False, cancel_futures=True)

    return server


def serve() -> None:
    """Speak LSP on stdin / stdout until the client says exit."""
    from loopcheck.server.stdio import start_io

    logging.basicConfig(level=logging.WARNING, format="loopcheck server: %(levelname)s: %(message)s")
    # A check builds a parse tree and a loop model (some 10^5 objects) that live until the next
    # check; at the default threshold (700 allocations) the cyclic collector walks them dozens
    # of times per check. The server's process collects far less often.
    gc.set_threshold(_GC_THRESHOLD, 20, 20)
    start_io(build())
