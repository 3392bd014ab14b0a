"""A source file's text and how to turn it back into the same kind of bytes.

A file is decoded with the encoding Python itself would use (a PEP 263 coding cookie, a UTF-8
BOM, else UTF-8); a fixed version is encoded back in that encoding, BOM included, so a latin-1
module stays latin-1. Kept apart from the fixes so that the project reads texts the same way
without importing them.
"""

from __future__ import annotations

import codecs
import io
import tokenize
from dataclasses import dataclass


@dataclass(frozen=True)
class SourceText:
    """A file's text and how to turn it back into the same kind of bytes."""

    text: str
    encoding: str
    bom: bool = False

    @classmethod
    def decode(cls, data: bytes) -> "SourceText":
        """ValueError (with the reason) when the bytes are not text in their declared encoding."""
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as exc:
            raise ValueError(f"cannot decode: {getattr(exc, 'msg', exc)}") from None
        bom = encoding == "utf-8-sig"
        try:
            text = data.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ValueError(f"cannot decode as {encoding}: {exc}") from None
        if text.startswith("\ufeff"):
            text, bom = text[1:], True
        return cls(text, "utf-8" if encoding == "utf-8-sig" else encoding, bom)

    def encode(self, text: str) -> bytes:
        """The bytes of a new version of the text; ValueError when the encoding cannot hold it."""
        try:
            data = text.encode(self.encoding)
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"the fixed code has characters {self.encoding} cannot encode ({text[exc.start:exc.end]!r})"
            ) from None
        return (codecs.BOM_UTF8 + data) if self.bom else data
