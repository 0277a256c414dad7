"""The name of a registered object — an accounting rule, a DP statistic — as a value type.

A :class:`RegisteredName` is a ``str`` (it stores, compares and serialises as its name),
interned per subclass so that ``is`` compares, with ``.value`` (the name, as the enums these
names replaced called it) and a pickle form that re-validates on load. Iterating a subclass
(whose metaclass is :class:`RegistryType`) yields the registry's names in order; each subclass
says what they are (``_names``) and validates in ``__new__``.

Example:
    >>> from blockbudget.accounting import Accounting
    >>> isinstance(Accounting.BASIC, RegisteredName), Accounting.BASIC.value
    (True, 'basic')
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Self


class RegistryType(type):
    """Iterating the class lists every registered name, in the registry's order."""

    def __iter__(cls) -> Iterator[Any]:
        return iter([cls(n) for n in cls._names()])  # type: ignore[attr-defined]

    def __len__(cls) -> int:
        return len(cls._names())  # type: ignore[attr-defined]


class RegisteredName(str):
    """An interned, validated registry name (see the module docstring)."""

    __slots__ = ()

    _interned: ClassVar[dict[str, Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._interned = {}

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        """The registered names, in order."""
        raise NotImplementedError

    @classmethod
    def _intern(cls, name: str) -> Self:
        made = cls._interned.get(name)
        if made is None:
            made = str.__new__(cls, name)
            cls._interned[name] = made
        return made

    @property
    def value(self) -> str:
        """The stored name (as the enum this replaced called it)."""
        return str(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self),))
