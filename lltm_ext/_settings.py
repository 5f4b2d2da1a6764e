"""The environment variables lltm_ext reads at run time: ``lltm_ext.settings()``, and the text of
docs/settings.md.

The table is the compiled code's own (src/common/settings.h, which every read goes through; each
compiled module binds it as ``_settings()``); this module adds each variable's value now.
``python tools/docs/settings_md.py > docs/settings.md`` writes the docs from it and from the
build's knobs (tools/buildsys/config.py's ``BUILD_KNOBS``); tests/test_settings.py holds the two.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lltm_ext._extension import load_extension

# Any compiled module has the table; the first of these that loads gives it.
_OPS = ("gemm", "lltm", "lltm_sequence", "relu", "round_ste", "sigmoid")


@dataclass(frozen=True)
class Setting:
    """A run-time setting: an environment variable the compiled code reads.

    kind ``"choice"``: one of ``values`` (``"auto|fused|cublas"``), the first the default;
    ``"number"``: an integer of ``values`` (``"2|4|8|16"``) or in its range (``"1..64"``), where
    unset means the planner's own choice (``default`` None). ``read``: when the code reads it;
    ``forces``: what each value forces; ``current``: the environment's value now (None: unset).
    """

    name: str
    op: str
    kind: str
    values: str
    default: str | None
    read: str
    forces: str
    current: str | None


@functools.cache
def _table() -> tuple[dict[str, str], ...]:
    errors = []
    for op in _OPS:
        try:
            return tuple(dict(row) for row in load_extension(op)._settings())
        except ImportError as exc:
            errors.append(str(exc))
    raise ImportError("no compiled lltm_ext module loads: " + " | ".join(errors))


def settings() -> list[Setting]:
    """Every ``LLTM_EXT_*`` environment variable the compiled ops read at run time, from their
    own table (src/common/settings.h): name, op, values, default, when read, what each value
    forces, and its value in ``os.environ`` now."""
    return [
        Setting(
            name=row["name"],
            op=row["op"],
            kind=row["kind"],
            values=row["values"],
            default=row["values"].split("|")[0] if row["kind"] == "choice" else None,
            read=row["read"],
            forces=row["forces"],
            current=os.environ.get(row["name"]),
        )
        for row in _table()
    ]


def _values_markdown(s: Setting) -> str:
    if ".." in s.values:
        lo, hi = s.values.split("..")
        return f"`{lo}` to `{hi}`; unset: the planner's"
    words = [f"`{v}`" for v in s.values.split("|")]
    if s.kind == "choice":
        return words[0] + " (default), " + ", ".join(words[1:])
    return ", ".join(words) + "; unset: the planner's"


def markdown(build_knobs: Iterable[Any]) -> str:
    """docs/settings.md: the run-time settings (settings()) and `build_knobs` (objects with
    ``name``, ``values``, ``does``: tools/buildsys/config.py's ``BUILD_KNOBS``) as two tables."""
    lines = [
        "# Settings: the environment variables lltm_ext reads",
        "",
        "<!-- Written by `python tools/docs/settings_md.py > docs/settings.md` from",
        "src/common/settings.h (run time) and tools/buildsys/config.py (build); edit those, not",
        "this file. tests/test_settings.py fails when they differ. -->",
        "",
        "## Run time",
        "",
        "Read by the compiled ops (`lltm_ext.settings()` lists them, with their values now). Unset",
        "or empty is the default. Most are for tests and measurements: they force a kernel, a",
        "shape or a path that the planners otherwise choose (why they choose as they do:",
        "[decisions.md](decisions.md)). A value outside the listed ones is an error that names the",
        "variable and its values.",
        "",
        "| variable | op | values | read at | what it forces |",
        "|---|---|---|---|---|",
    ]
    for s in settings():
        lines.append(f"| `{s.name}` | `{s.op}` | {_values_markdown(s)} | {s.read} | {s.forces} |")
    lines += [
        "",
        "## Build",
        "",
        "Read by `setup.py` (`pip install`, `python setup.py build_ext`); what a build does with",
        "them: the README's [Building from source](../README.md#building-from-source) and",
        "[build_notes.md](build_notes.md).",
        "",
        "| variable | values | effect |",
        "|---|---|---|",
    ]
    lines += [f"| `{k.name}` | {k.values} | {k.does} |" for k in build_knobs]
    return "\n".join(lines) + "\n"
