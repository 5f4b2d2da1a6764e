#!/usr/bin/env python3
"""The user's install path end to end, on this machine: a built wheel on its find-links page,
served over HTTP on 127.0.0.1, installed by `pip install lltm_ext -f <page>`.

    python tools/release/loopback_install.py --wheel-dir DIR
        (--torch-env PY | --torch-index-url URL) [--other-torch VERSION|WHEEL]
        [--expect-cuda yes|no|any] [--work DIR] [--keep]

1. Writes the page of the wheel in DIR (tools/release/find_links.py: SITE/whl/torch-A.B+cuXYZ.html,
   the wheel copied beside it) and serves SITE with `python -m http.server` on 127.0.0.1, on a
   free port.
2. Matching torch: a fresh virtual environment with the torch the wheel was built for, either
   seen from the build environment PY (--torch-env: a venv whose site path ends with PY's, as
   build_wheel.sh --test-env inherit makes it; nothing downloaded) or installed from an index
   (--torch-index-url, the exact version the wheel was built with). There,
       pip install --no-index --find-links http://127.0.0.1:PORT/whl/<page> \\
           --only-binary lltm_ext --report R lltm_ext
   must install that wheel: pip's report names the served URL and its sha256, and nothing is
   built. --no-index: pip sees only the page, so it cannot fall back to an sdist of lltm_ext
   from the package index (or to another torch); --only-binary lltm_ext: not even an sdist on
   the page could be built. Then tools/packaging/smoke_test.py runs against the install (from
   outside the source tree), and `lltm-ext info` must name the same page for this torch.
3. Another torch minor (--other-torch, e.g. 2.12.1: a fresh venv with that torch from the
   index, or from a torch wheel file, e.g. a CPU-only build on disk; with --torch-env, the build
   environment's other packages are seen behind it, so only torch itself is installed, without
   its dependencies): the same command must fail, install
   nothing, and say why (pip names the wheel's torch==A.B.* requirement); and a forced install
   (--no-deps) must stop at `import lltm_ext` with the ImportError that names this torch's page.

Prints each step and what pip printed; exit status 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if not __package__:  # run as a script (as CI does): the source root, for `tools`
    sys.path.insert(0, str(ROOT))
from tools.release import find_links  # noqa: E402


class Failed(Exception):
    """A check that did not hold."""


def step(msg: str) -> None:
    print(f"\n==> loopback: {msg}", flush=True)


def need(ok: bool, what: str, detail: str = "") -> None:
    print(f"  {'ok  ' if ok else 'FAIL'}  {what}" + ("" if ok or not detail else f": {detail}"))
    if not ok:
        raise Failed(f"{what}: {detail}" if detail else what)


def pip_env() -> dict[str, str]:
    """pip without this machine's configuration (its find-links folder and extra indexes)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX")
    }
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INPUT="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_PROGRESS_BAR="off",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def run(cmd: list[str], cwd: Path, show: bool = True) -> subprocess.CompletedProcess[str]:
    print("  $ " + " ".join(cmd), flush=True)
    out = subprocess.run(cmd, cwd=cwd, env=pip_env(), capture_output=True, text=True, timeout=1800)
    if show:
        lines = (out.stdout + out.stderr).rstrip().splitlines()
        shown = [ln for ln in lines if not ln.startswith("Requirement already satisfied")]
        print("\n".join("    | " + line for line in shown) if shown else "    | -")
        if len(shown) < len(lines):
            print(f"    | ({len(lines) - len(shown)} lines 'Requirement already satisfied: ...')")
    return out


# --------------------------------------------------------------------------------------------
# The server.
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(site: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """`python -m http.server` on 127.0.0.1 and a free port, serving `site`; waits until it
    answers (a few tries, in case another process took the port first)."""
    for _ in range(3):
        port = free_port()
        cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
        print("  $ " + " ".join(cmd + ["--directory", str(site)]), flush=True)
        with open(log, "ab") as f:
            proc = subprocess.Popen(
                cmd + ["--directory", str(site)], stdout=f, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/whl/index.html", timeout=2):
                    return proc, port
            except OSError:
                time.sleep(0.2)
        stop(proc)
    raise Failed(f"python -m http.server did not start (log: {log})")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------------------------
# Environments.
# --------------------------------------------------------------------------------------------


def site_dirs(python: str) -> list[str]:
    """The site folders a Python imports packages from (its own, and any a .pth of it adds)."""
    code = (
        "import site, sys; print('\\n'.join(dict.fromkeys(site.getsitepackages() + "
        "[p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))])))"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line]


def make_venv(where: Path, torch_env: str | None) -> Path:
    """A fresh venv; with torch_env, one whose site path ends with that Python's (its torch and
    pip are seen, and packages installed here come first)."""
    shutil.rmtree(where, ignore_errors=True)
    base = sys._base_executable if hasattr(sys, "_base_executable") else sys.executable
    if torch_env is None:
        subprocess.run([base, "-m", "venv", str(where)], check=True)
    else:
        subprocess.run([base, "-m", "venv", "--without-pip", str(where)], check=True)
        py = where / "bin" / "python"
        purelib = subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        Path(purelib, "_lltm_ext_torch_env.pth").write_text("\n".join(site_dirs(torch_env)) + "\n")
    return where / "bin" / "python"


def torch_of(python: Path, cwd: Path) -> tuple[str, str | None]:
    code = "import torch; print(torch.__version__, torch.version.cuda or '')"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=cwd)
    if out.returncode != 0:
        raise Failed(f"torch does not import in {python}: {out.stderr.strip()[-800:]}")
    version, _, cuda = out.stdout.strip().partition(" ")
    return version, cuda or None


# --------------------------------------------------------------------------------------------
# The checks.
# --------------------------------------------------------------------------------------------


def user_command(python: Path, page_url: str, report: Path | None, *extra: str) -> list[str]:
    cmd = [str(python), "-m", "pip", "install", "--no-index", "--find-links", page_url]
    cmd += ["--only-binary", "lltm_ext", *extra]
    if report is not None:
        cmd += ["--report", str(report)]
    return cmd + ["lltm_ext"]


def check_matching(args, work: Path, wheel: Path, page_url: str, served: str) -> None:
    meta = find_links.parse(wheel.name, "", None)
    step(
        f"a fresh venv with the wheel's torch ({meta.torch}, {meta.variant}): install from the page"
    )
    py = make_venv(work / "venv-match", args.torch_env)
    if args.torch_env is None:
        built = wheel_torch(wheel)
        out = run(
            [
                str(py),
                "-m",
                "pip",
                "install",
                f"torch=={built}",
                "--index-url",
                args.torch_index_url,
            ],
            work,
            show=False,
        )
        need(
            out.returncode == 0,
            f"torch {built} installs from {args.torch_index_url}",
            out.stderr[-1500:],
        )
    version, cuda = torch_of(py, work)
    print(f"  torch here: {version} (CUDA {cuda or 'none'})")
    report = work / "report-match.json"
    out = run(user_command(py, page_url, report), work)
    need(out.returncode == 0, "pip install lltm_ext -f <page> succeeds", out.stderr[-2000:])
    installs = json.loads(report.read_text())["install"]
    names = [i["metadata"]["name"] for i in installs]
    need(names == ["lltm_ext"], "pip installs lltm_ext and nothing else", f"installs {names}")
    item = installs[0]
    url = item["download_info"]["url"]
    need(url == served, "pip downloaded the served wheel", f"{url}, expected {served}")
    sha = item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
    need(sha == sha256(wheel), "with the page's sha256", f"report says {sha}")
    need(url.endswith(".whl") and not item.get("is_direct"), "a wheel found through the page")
    text = out.stdout + out.stderr
    need("Building wheel" not in text and "setup.py" not in text, "nothing was built")
    version_installed = item["metadata"]["version"]
    step(
        "smoke test of the installed wheel (tools/packaging/smoke_test.py, outside the source tree)"
    )
    cmd = [
        str(py),
        str(ROOT / "tools" / "packaging" / "smoke_test.py"),
        "--prefix",
        str(py.parent.parent),
    ]
    cmd += ["--expect-version", version_installed, "--expect-cuda", args.expect_cuda]
    out = run(cmd, work)
    need(out.returncode == 0, "the smoke test passes", out.stdout[-1500:])
    step("lltm-ext info names the page of this torch")
    out = run([str(py.parent / "lltm-ext"), "info"], work)
    need(out.returncode == 0, "lltm-ext info runs", out.stderr[-800:])
    line = next((ln for ln in out.stdout.splitlines() if "pip install lltm_ext -f" in ln), "")
    page = find_links.page_name(meta.torch, cuda)
    if (meta.variant == "cpu") == (cuda is None):
        need(line.endswith("/" + meta.page), f"it prints the page served here ({meta.page})", line)
    else:  # e.g. a CPU-only wheel tried under a CUDA torch: another variant's page
        need(line.endswith("/" + page), f"it prints the page of this torch ({page})", line)


def check_other(args, work: Path, wheel: Path, page_url: str) -> None:
    meta = find_links.parse(wheel.name, "", None)
    other, other_wheel = args.other_torch, None
    if other.endswith(".whl"):  # torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
        other_wheel = Path(other).resolve()
        need(other_wheel.is_file(), f"the torch wheel {other} exists")
        other = other_wheel.name.split("-")[1]
    step(
        f"a fresh venv with torch {other}, another minor: the page of torch {meta.torch} must "
        "not install"
    )
    py = make_venv(work / "venv-other", args.torch_env)
    if args.torch_env is not None:
        # torch alone, into the venv's own site-packages, ahead of the build environment's;
        # its dependencies are the build environment's (chosen to be the same versions).
        cmd = [str(py), "-m", "pip", "install", "--no-deps", str(other_wheel or f"torch=={other}")]
    else:
        cmd = [str(py), "-m", "pip", "install", str(other_wheel or f"torch=={other}")]
        cmd += ["--index-url", args.torch_index_url]
    out = run(cmd, work, show=False)
    need(out.returncode == 0, f"torch {other} installs", out.stderr[-1500:])
    version, cuda = torch_of(py, work)
    print(f"  torch here: {version} (CUDA {cuda or 'none'})")
    need(
        version.split("+")[0] == other.split("+")[0], f"torch {other} is the one imported", version
    )
    out = run(user_command(py, page_url, None), work)
    need(out.returncode != 0, "pip refuses", "it installed the mismatched wheel")
    text = out.stdout + out.stderr
    need(f"torch=={meta.torch}.*" in text, f"pip says why (the wheel needs torch=={meta.torch}.*)")
    shown = subprocess.run(
        [str(py), "-m", "pip", "show", "lltm_ext"],
        capture_output=True,
        text=True,
        cwd=work,
        env=pip_env(),
    )
    need(shown.returncode != 0, "no lltm_ext is installed", shown.stdout[:300])
    step("the same wheel forced in (--no-deps): import lltm_ext says what to install instead")
    out = run(user_command(py, page_url, None, "--no-deps"), work, show=False)
    need(out.returncode == 0, "pip install --no-deps installs it", out.stderr[-1500:])
    imp = subprocess.run(
        [str(py), "-c", "import lltm_ext"], capture_output=True, text=True, cwd=work
    )
    message = imp.stderr.strip().splitlines()[-1] if imp.stderr.strip() else ""
    print("    | " + message)
    page = find_links.page_name(".".join(other.split(".")[:2]), cuda)
    need(imp.returncode != 0 and "ImportError" in message, "import lltm_ext raises ImportError")
    need(f"built for torch {meta.torch}" in message, "naming the torch it was built for")
    need(page in message, f"and the page for this torch ({page})")


def wheel_torch(wheel: Path) -> str:
    """The exact torch version the wheel was built with (its build record)."""
    import zipfile

    from tools.packaging import check_dist

    with zipfile.ZipFile(wheel) as zf:
        info = check_dist.read_build_info(zf.read("lltm_ext/_build_info.py").decode())
    if not info:
        raise Failed(f"{wheel.name} has no build record")
    return info["torch_version"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel-dir", type=Path, required=True, help="holds one lltm_ext wheel")
    torch_from = parser.add_mutually_exclusive_group(required=True)
    torch_from.add_argument("--torch-env", help="a Python whose torch the venvs see (offline)")
    torch_from.add_argument("--torch-index-url", help="install the wheel's torch from this index")
    parser.add_argument(
        "--other-torch",
        help="a torch of another minor to refuse: a version (from the index) or a wheel file",
    )
    parser.add_argument("--expect-cuda", choices=["yes", "no", "any"], default="any")
    parser.add_argument("--work", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)

    wheels = sorted(args.wheel_dir.glob("lltm_ext-*.whl"))
    if len(wheels) != 1:
        print(
            f"loopback: expected one lltm_ext wheel in {args.wheel_dir}, found {len(wheels)}",
            file=sys.stderr,
        )
        return 1
    wheel = wheels[0]
    work = args.work or Path(tempfile.mkdtemp(prefix="lltm_ext-loopback-"))
    work.mkdir(parents=True, exist_ok=True)
    proc = None
    start = time.monotonic()
    try:
        step(f"the find-links page of {wheel.name}")
        site = work / "site"
        shutil.rmtree(site, ignore_errors=True)
        page = find_links.write_site(
            site, find_links.local_wheels(wheel.parent, None, site / "whl" / "files")
        )
        (name,) = page
        print(f"  {site / 'whl' / name}:")
        print("\n".join("    | " + ln for ln in (site / "whl" / name).read_text().splitlines()))
        step("serve it on 127.0.0.1 (python -m http.server)")
        proc, port = serve(site, work / "http.log")
        page_url = f"http://127.0.0.1:{port}/whl/{name}"
        served = f"http://127.0.0.1:{port}/whl/{page[name][0].url}"
        print(f"  page: {page_url}")
        check_matching(args, work, wheel, page_url, served)
        if args.other_torch:
            check_other(args, work, wheel, page_url)
    except Failed as exc:
        print(f"\nloopback: FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if proc is not None:
            stop(proc)
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nloopback: OK in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
