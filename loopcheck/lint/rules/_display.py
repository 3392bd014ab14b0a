"""How the model's names are shown in messages: as the user wrote them.

The model keeps two objects bound to one name in different functions apart as `name@function`;
a message names the object the way the code does (`optimizer`), its line says which one.
"""

from __future__ import annotations


def shown(name: str | None, default: str = "") -> str:
    """`optimizer@train` -> `optimizer`; `self.optimizer` stays as it is."""
    if not name:
        return default
    return name.split("@", 1)[0]
