"""The map of the source tree in docs/architecture.md, written from the tree itself.

docs/architecture.md's "Map" section holds, between the markers ``<!-- map:begin -->`` and
``<!-- map:end -->``, every folder of src/, lltm_ext/ and tools/ with its files, and each folder's
role (the purpose line atop its first file). This script writes that block; ``--check`` fails when
the committed block differs from what it would write (tests/test_packaging.py runs the check), so
a file added, moved or removed without the map following fails CI.

Usage: python tools/docs/architecture_map.py [--check | --write]   (default: print the block)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- map:begin -->", "<!-- map:end -->"
TREES = ("src", "lltm_ext", "tools")
KEEP = (".h", ".cuh", ".cu", ".cpp", ".py", ".sh", ".txt", ".json", ".md")
SKIP = ("__pycache__", "_build_info.py")


def tracked(root: Path) -> list[Path]:
    """The files of the trees this map covers, in path order: sources and scripts, not build
    outputs (the map is of what git holds)."""
    files = []
    for top in TREES:
        for path in sorted((root / top).rglob("*")):
            rel = path.relative_to(root)
            if not path.is_file() or path.suffix not in KEEP:
                continue
            if any(part in SKIP for part in rel.parts) or path.name in SKIP:
                continue
            files.append(rel)
    return files


def purpose(path: Path) -> str:
    """The first sentence of a file's purpose line (its leading comment or docstring), one line."""
    text = path.read_text(errors="replace")
    if path.suffix == ".py":
        docstring = r'\s*(?:#[^\n]*\n\s*)*(?:"""|\'\'\')(.*?)(?:\n\s*\n|"""|\'\'\')'
        match = re.match(docstring, text, re.S)
        body = match[1] if match else ""
    elif path.suffix in (".sh",):
        lines = [ln for ln in text.splitlines()[1:] if ln.startswith("#")]
        body = " ".join(ln.lstrip("# ") for ln in lines[:3])
    elif path.suffix in (".txt",):
        lines = [ln for ln in text.splitlines() if ln.startswith("#")]
        body = " ".join(ln.lstrip("# ") for ln in lines[:3])
    else:
        lines = []
        for ln in text.splitlines():
            if not ln.startswith("//"):
                break
            lines.append(ln.lstrip("/ "))
        body = " ".join(lines)
    body = " ".join(body.split())
    depth, end = 0, len(body)
    for i, ch in enumerate(body):  # the first sentence: a ". " outside parentheses
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "." and depth == 0 and body[i + 1 : i + 2] == " " and body[i - 1 : i] != ".":
            end = i
            break
    first = body[:end].rstrip(".:")
    return first if len(first) <= 90 else first[:87].rsplit(" ", 1)[0] + " ..."


def block(root: Path = ROOT) -> str:
    """The map: one entry a folder (its files), each file with its purpose's first sentence."""
    folders: dict[Path, list[Path]] = {}
    for rel in tracked(root):
        folders.setdefault(rel.parent, []).append(rel)
    out = [BEGIN, "```"]
    for folder in sorted(folders, key=lambda p: p.parts):
        out.append(f"{folder.as_posix()}/")
        for rel in folders[folder]:
            out.append(f"  {rel.name:<34} {purpose(root / rel)}".rstrip())
    out += ["```", END]
    return "\n".join(out)


def current(doc: Path = DOC) -> str:
    text = doc.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < 0:
        raise SystemExit(f"{doc}: no {BEGIN} ... {END} block")
    return text[start : end + len(END)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="fail if the committed map is stale")
    group.add_argument("--write", action="store_true", help="write the map into the doc")
    args = parser.parse_args()
    fresh = block()
    if args.check:
        if current() != fresh:
            print(
                "docs/architecture.md's map differs from the tree: run "
                "python tools/docs/architecture_map.py --write",
                file=sys.stderr,
            )
            return 1
        return 0
    if args.write:
        DOC.write_text(DOC.read_text().replace(current(), fresh))
        return 0
    print(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
