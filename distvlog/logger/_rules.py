"""VLOG rules: the verbosity each module logs at, as glog's --v and --vmodule.

A `Rules` value is immutable; changing verbosity swaps in a new one. `vlog_guard` swaps it for the current
thread only. `ceiling` is the highest level any rule in force could allow, so a disabled `vlog` call is
rejected with one integer comparison before any per-module look-up.
"""

from __future__ import annotations

import contextlib
import fnmatch
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping

from . import _env, _paddle_modules

LevelSpec = int | Mapping[str, int] | str


def _check_level(level: object, what: str) -> int:
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"{what} must be an int, got {type(level).__name__} {level!r}")
    return level


def _check_pattern(pattern: object) -> str:
    if not isinstance(pattern, str) or not pattern:
        raise TypeError(f"a vmodule pattern must be a module name or glob (a non-empty str), got {pattern!r}")
    return pattern


class Rules:
    """A global level plus `glob=level` patterns (first match wins): matched on a module's basename, as glog
    matches file basenames, or on its whole dotted name when the pattern has a dot (`distvlog.distributed.*`)."""

    __slots__ = ("level", "patterns", "_cache")

    def __init__(self, level: int = 0, patterns: tuple[tuple[str, int], ...] = ()) -> None:
        self.level = level
        self.patterns = patterns
        self._cache: dict[str, int] = {}

    @property
    def highest(self) -> int:
        return max([self.level, *(lvl for _, lvl in self.patterns)])

    def level_for(self, module: str) -> int:
        try:
            return self._cache[module]
        except KeyError:
            pass
        base = module.rsplit(".", 1)[-1]
        level = self.level
        for pattern, lvl in self.patterns:
            if fnmatch.fnmatchcase(module if "." in pattern else base, pattern):
                level = lvl
                break
        self._cache[module] = level
        return level

    def updated(self, spec: LevelSpec) -> Rules:
        """These rules with `spec` applied: an int sets the global level, a mapping or
        'name=level,glob*=level' string puts module patterns in front of the existing ones (Paddle's module
        names set their counterparts here too, and Paddle's `*` key the global level: `_paddle_modules`)."""
        if isinstance(spec, str):
            spec = parse_vmodule(spec)
        if isinstance(spec, Mapping):
            checked = {_check_pattern(p): _check_level(lvl, f"vmodule level for {p!r}") for p, lvl in spec.items()}
            level, patterns = _paddle_modules.translate(checked)
            kept = tuple(item for item in self.patterns if item[0] not in patterns)
            return Rules(self.level if level is None else level, tuple(patterns.items()) + kept)
        return Rules(_check_level(spec, "verbosity level"), self.patterns)


def parse_vmodule(text: str) -> dict[str, int]:
    """Parse glog's `name=level,glob*=level` syntax."""
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, level = item.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            out[name.strip()] = int(level)
        except ValueError:
            raise ValueError(f"{item!r} is not of the form name=level") from None
    return out


def _rules_from_env() -> Rules:
    level = _env.read(("DISTVLOG_V", "GLOG_v"), _env.integer, 0)
    vmodule = _env.read(
        ("DISTVLOG_VMODULE", "GLOG_vmodule"),
        parse_vmodule,
        {},
        show=lambda spec: ",".join(f"{name}={lvl}" for name, lvl in spec.items()) or "none",
    )
    return Rules(level).updated(vmodule)


class _ThreadRules(threading.local):
    rules: Rules | None = None


_process = _rules_from_env()
_thread = _ThreadRules()
_lock = threading.Lock()
_active_guard_levels: Counter[int] = Counter()
ceiling = _process.highest
_watchers: list[Callable[[], None]] = []


def _update_ceiling() -> None:
    global ceiling
    ceiling = max([_process.highest, *_active_guard_levels])


def on_change(callback: Callable[[], None]) -> None:
    """Call `callback()` after every change of the rules in force, in the thread that made it (whose rules
    changed): the torch adapter hooks torch's backward by it while the engine's level logs. It must not raise."""
    _watchers.append(callback)


def _changed() -> None:
    for callback in _watchers:
        callback()


def current() -> Rules:
    """The rules in force for the calling thread."""
    return _thread.rules or _process


def level_for(module: str) -> int:
    """The verbosity `module` logs at in the calling thread."""
    return (_thread.rules or _process).level_for(module)


def set_vlog_level(spec: LevelSpec) -> None:
    """Change verbosity for the whole process from now on: an int for the global level, or
    `{"engine": 5, "dist*": 2}` / `"engine=5,dist*=2"` for per-module levels."""
    global _process
    with _lock:
        _process = _process.updated(spec)
        _update_ceiling()
    _changed()


@contextlib.contextmanager
def vlog_guard(spec: LevelSpec) -> Iterator[None]:
    """Verbosity for a region of the calling thread (forward op lines, untagged nodes, your own vlogs)."""
    rules = current().updated(spec)
    previous = _thread.rules
    with _lock:
        _active_guard_levels[rules.highest] += 1
        _update_ceiling()
    _thread.rules = rules
    _changed()
    try:
        yield
    finally:
        _thread.rules = previous
        _changed()
        with _lock:
            _active_guard_levels[rules.highest] -= 1
            if not _active_guard_levels[rules.highest]:
                del _active_guard_levels[rules.highest]
            _update_ceiling()
