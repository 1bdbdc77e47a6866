"""Types of etkit._records, the compiled module (_records.c): a record's __init__."""

from collections.abc import Callable
from typing import Any

class RecordInit:
    params: tuple[str, ...]
    names: tuple[str, ...]
    __signature__: Any
    def __init__(self, qualname: str, self_name: str, params: tuple[str, ...], npos: int, ndefaults: int,
                 required: bytes, names: tuple[str, ...], kinds: bytes, param_of: tuple[int, ...],
                 values: tuple[Any, ...], frozen: bool, post_init: bool, signature_maker: Callable[[], Any],
                 cls: type | None = None) -> None: ...
    def __call__(self, instance: Any, /, *args: Any, **kwargs: Any) -> None: ...
    def __get__(self, obj: Any, owner: type | None = None) -> Any: ...
