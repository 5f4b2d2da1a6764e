#!/usr/bin/env python3
"""Write the find-links pages pip reads: one HTML page per (torch, CUDA) listing its wheels.

    python tools/release/find_links.py --out SITE [--wheels DIR] [--wheel-url URL] [--assets JSON]

For `pip install lltm_ext -f <page>`, the form PyG's wheel pages use (pip's --find-links: an HTML
page whose links are the files; PEP 503's anchor form, each with its ``#sha256=`` so pip checks
what it downloads). A wheel's page comes from its local version label, the one the build writes:
``lltm_ext-0.1.0+cu130torch2.13-...whl`` is listed on ``SITE/whl/torch-2.13+cu130.html``
(tools/release/wheel_matrix.py ``page_name``; ``+cputorch2.13`` -> ``torch-2.13+cpu.html``). A page
holds only wheels of its own torch and CUDA, so pip never meets another torch's wheel there.
``SITE/whl/index.html`` lists the pages for people.

Wheels come from ``--wheels DIR`` (hashed here; with no --wheel-url they are copied to
``SITE/whl/files/`` and linked relatively, as the loopback test serves them) and/or from
``--assets JSON``, a list (or lines) of ``{"name", "url", "sha256"}`` (published files: the
wheels workflow lists every release's assets, so a new release's pages keep the older wheels).
Only the standard library is used.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

if not __package__:  # run as a script: the source root, for `tools`; imported as a module,
    # sys.path is the importer's (inserting the root first would shadow an installed lltm_ext for
    # the rest of that process, and for processes it spawns)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.release.wheel_matrix import page_name

# name-version(-build)?-python-abi-platform.whl (the wheel file name, PEP 427)
_WHEEL = re.compile(
    r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[^-]+)(-(?P<build>\d[^-]*))?"
    r"-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)
_LABEL = re.compile(r"^(?P<variant>cpu|cu\d+)torch(?P<torch>\d+\.\d+)$")
PACKAGE = "lltm_ext"


class PageError(ValueError):
    """A file that cannot be placed on a page (not a wheel of ours, or no torch/CUDA label)."""


@dataclass(frozen=True)
class Wheel:
    name: str  # file name
    url: str  # where pip downloads it (absolute, or relative to the page)
    sha256: str | None
    torch: str  # '2.13'
    variant: str  # 'cu130' or 'cpu'

    @property
    def page(self) -> str:
        cuda = "cpu" if self.variant == "cpu" else f"{self.variant[2:-1]}.{self.variant[-1]}"
        return page_name(self.torch, cuda)


def parse(name: str, url: str, sha256: str | None) -> Wheel:
    """A wheel of lltm_ext with its page, from its file name; PageError for anything else."""
    match = _WHEEL.match(name)
    if not match or match["name"].lower().replace("-", "_") != PACKAGE:
        raise PageError(f"{name}: not a wheel of {PACKAGE}")
    label = match["version"].partition("+")[2]
    found = _LABEL.match(label)
    if not found:
        raise PageError(
            f"{name}: its version has no torch/CUDA label (like +cu130torch2.13), so it cannot "
            "be placed on a page: release wheels are built with LLTM_EXT_VERSION_SUFFIX=auto"
        )
    if sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise PageError(f"{name}: sha256 {sha256!r} is not 64 hex digits")
    return Wheel(name, url, sha256, found["torch"], found["variant"])


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def local_wheels(folder: Path, wheel_url: str | None, files_dir: Path) -> list[Wheel]:
    """The wheels in `folder`: linked at `wheel_url` + name, or copied to `files_dir` and linked
    relatively (files/<name>)."""
    found = []
    for path in sorted(folder.glob(f"{PACKAGE}-*.whl")):
        if wheel_url:
            url = wheel_url.rstrip("/") + "/" + quote(path.name)
        else:
            files_dir.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, files_dir / path.name)
            url = f"{files_dir.name}/{quote(path.name)}"
        found.append(parse(path.name, url, sha256_of(path)))
    return found


def asset_wheels(path: Path) -> list[Wheel]:
    """Published wheels listed in a JSON file, a list of {"name", "url", "sha256" (or null)} or
    one such object per line (as `gh api --jq` writes them); other files of a release (the
    sdist) are skipped."""
    text = path.read_text(encoding="utf-8").strip()
    if text.startswith("["):
        items = json.loads(text)
    else:
        items = [json.loads(line) for line in text.splitlines() if line.strip()]
    found = []
    for item in items:
        if item["name"].endswith(".whl"):
            sha = item.get("sha256")
            if sha and sha.startswith("sha256:"):  # GitHub's asset "digest" form
                sha = sha[len("sha256:") :]
            found.append(parse(item["name"], item["url"], sha or None))
    return found


def page_html(title: str, wheels: list[Wheel]) -> str:
    links = []
    for w in sorted(wheels, key=lambda w: w.name):
        href = w.url + (f"#sha256={w.sha256}" if w.sha256 else "")
        links.append(f'    <a href="{html.escape(href)}">{html.escape(w.name)}</a><br>')
    return (
        '<!DOCTYPE html>\n<html>\n  <head>\n    <meta charset="utf-8">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n"
        f"    <h1>{html.escape(title)}</h1>\n" + "\n".join(links) + "\n  </body>\n</html>\n"
    )


def index_html(pages: dict[str, list[Wheel]]) -> str:
    rows = []
    for page, wheels in sorted(pages.items()):
        rows.append(
            f'    <li><a href="{html.escape(page)}">{html.escape(page)}</a>: '
            f"<code>pip install {PACKAGE} -f &lt;this folder&gt;/{html.escape(page)}</code> "
            f"({len(wheels)} wheels)</li>"
        )
    return (
        '<!DOCTYPE html>\n<html>\n  <head>\n    <meta charset="utf-8">\n'
        f"    <title>{PACKAGE} wheels</title>\n  </head>\n  <body>\n"
        f"    <h1>{PACKAGE} wheels, one page per torch and CUDA</h1>\n"
        "    <p>Pick the page of the torch you have installed (<code>lltm-ext info</code> "
        "prints it once lltm_ext is installed).</p>\n    <ul>\n"
        + "\n".join(rows)
        + "\n    </ul>\n  </body>\n</html>\n"
    )


def write_site(out: Path, wheels: list[Wheel]) -> dict[str, list[Wheel]]:
    """Writes out/whl/<page> for each page and out/whl/index.html; returns the pages."""
    names = [w.name for w in wheels]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PageError(f"wheels listed twice: {dupes}")
    pages: dict[str, list[Wheel]] = {}
    for w in wheels:
        pages.setdefault(w.page, []).append(w)
    folder = out / "whl"
    folder.mkdir(parents=True, exist_ok=True)
    for page, listed in pages.items():
        title = f"{PACKAGE} wheels for torch {listed[0].torch} ({listed[0].variant})"
        (folder / page).write_text(page_html(title, listed), encoding="utf-8")
    (folder / "index.html").write_text(index_html(pages), encoding="utf-8")
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the site folder to write")
    parser.add_argument("--wheels", type=Path, help="a folder of lltm_ext wheels")
    parser.add_argument(
        "--wheel-url",
        help="where the --wheels files are published (URL of their folder); default: copy them "
        "to SITE/whl/files/ and link relatively",
    )
    parser.add_argument("--assets", type=Path, help='JSON list of {"name", "url", "sha256"}')
    args = parser.parse_args(argv)
    if not args.wheels and not args.assets:
        parser.error("give --wheels and/or --assets")
    try:
        wheels = []
        if args.wheels:
            wheels += local_wheels(args.wheels, args.wheel_url, args.out / "whl" / "files")
        if args.assets:
            wheels += asset_wheels(args.assets)
        if not wheels:
            raise PageError("no lltm_ext wheels found")
        pages = write_site(args.out, wheels)
    except PageError as exc:
        print(f"find_links: error: {exc}", file=sys.stderr)
        return 1
    for page, listed in sorted(pages.items()):
        print(f"find_links: {args.out / 'whl' / page}: {len(listed)} wheels")
        for w in sorted(listed, key=lambda w: w.name):
            print(f"    {w.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
