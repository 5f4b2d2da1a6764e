"""The build logic (tools/buildsys/) without building: architecture lists, knobs, sources, the
compiler choice, failure summaries; and that every place that names architectures reads the one
definition (tools/buildsys/archs.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # appended: the installed lltm_ext, if any, stays first

from tools.buildsys import archs, config, toolchain  # noqa: E402
from tools.buildsys.command import short_status, write_top_ninja  # noqa: E402

# --------------------------------------------------------------------------------------------
# Architecture lists.
# --------------------------------------------------------------------------------------------


def test_parse_accepts_the_separators_torch_and_users_write():
    for text in ("8.0;9.0+PTX", "8.0,9.0+PTX", "8.0 9.0+PTX", " 9.0+PTX ; 8.0 ", "8.0;;9.0+PTX"):
        assert archs.normalize(text) == "8.0;9.0+PTX", text
    assert archs.targets("8.0,9.0+PTX") == ["sm_80", "sm_90", "compute_90"]


def test_parse_families_suffixes_and_duplicates():
    assert archs.normalize("Hopper") == "9.0+PTX"
    assert archs.normalize("Ampere;8.0") == "8.0;8.6+PTX"
    assert archs.targets("9.0a") == ["sm_90a"]
    assert archs.normalize("9.0;9.0+PTX;9.0") == "9.0+PTX"
    assert archs.normalize("12.0;7.5;10.0") == "7.5;10.0;12.0"  # numeric order, not text order


@pytest.mark.parametrize("bad", ["", " ; ", "sm_90", "9", "9.0+ptx", "Hoper", "9.0;x"])
def test_parse_rejects_with_a_message_naming_the_variable(bad):
    with pytest.raises(archs.ArchListError, match="TORCH_CUDA_ARCH_LIST"):
        archs.parse(bad)


def test_default_lists_per_toolkit():
    assert archs.default_arch_list("13.0") == "7.5;8.0;8.6;8.9;9.0;9.0a;10.0;12.0+PTX"
    assert archs.default_arch_list("12.8") == "7.0;7.5;8.0;8.6;8.9;9.0;9.0a;10.0;12.0+PTX"
    assert archs.default_arch_list("12.6") == "7.0;7.5;8.0;8.6;8.9;9.0+PTX;9.0a"
    assert archs.default_arch_list("11.8") == "7.0;7.5;8.0;8.6;8.9;9.0+PTX"  # no sm_90a yet
    # What nvcc says wins over the release table.
    codes = "sm_75 sm_80 sm_86 sm_87 sm_88 sm_89 sm_90 sm_100 sm_110 sm_103 sm_120 sm_121".split()
    assert archs.default_arch_list("13.0", codes) == "7.5;8.0;8.6;8.9;9.0;9.0a;10.0;12.0+PTX"
    assert archs.default_arch_list("13.0", ["sm_80", "sm_90"]) == "8.0;9.0+PTX;9.0a"
    assert archs.default_arch_list("13.0", ["sm_80", "sm_86"]) == "8.0;8.6+PTX"


def test_visible_gpus_and_unsupported_entries():
    assert archs.visible_arch_list([(9, 0)], "13.0") == "9.0+PTX;9.0a"
    assert archs.visible_arch_list([(9, 0), (8, 0), (9, 0)], "13.0") == "8.0;9.0+PTX;9.0a"
    assert archs.visible_arch_list([(8, 0)], "13.0") == "8.0+PTX"
    assert archs.visible_arch_list([], "13.0") is None
    assert archs.visible_arch_list([(7, 0)], "13.0") is None  # Volta: not in CUDA 13's nvcc
    assert [a.version for a in archs.unsupported(archs.parse("7.0;9.0"), "13.0")] == ["7.0"]


def test_archs_command_line():
    run = [sys.executable, str(ROOT / "tools" / "buildsys" / "archs.py")]
    out = subprocess.run(run + ["default", "--cuda", "12.6"], capture_output=True, text=True)
    assert out.stdout.strip() == "7.0;7.5;8.0;8.6;8.9;9.0+PTX;9.0a"
    out = subprocess.run(run + ["targets", "8.0,9.0+PTX"], capture_output=True, text=True)
    assert out.stdout.split() == ["sm_80", "sm_90", "compute_90"]
    bad = subprocess.run(run + ["normalize", "sm_90"], capture_output=True, text=True)
    assert bad.returncode == 2 and "TORCH_CUDA_ARCH_LIST" in bad.stderr


# --------------------------------------------------------------------------------------------
# One definition: nothing else names or parses architecture lists.
# --------------------------------------------------------------------------------------------


def test_wheels_workflow_names_no_architecture_list():
    text = (ROOT / ".github" / "workflows" / "wheels.yml").read_text()
    assert "TORCH_CUDA_ARCH_LIST" not in text.replace("# ", "")
    assert not re.search(r"\barchs\s*:", text), "wheels.yml lists architectures"
    assert not re.search(r"\d+\.\d\s*;\s*\d+\.\d", text), "wheels.yml spells an arch list"


def test_settings_doc_states_the_default_list():
    # docs/settings.md's build table (config.BUILD_KNOBS, which tests/test_settings.py holds it to).
    text = (ROOT / "docs" / "settings.md").read_text()
    for cuda in ("13.0", "12.8", "12.6"):
        assert f"`{archs.default_arch_list(cuda)}` with CUDA {cuda}" in text, cuda


def test_release_tools_read_architectures_through_tools_buildsys_archs():
    for script in (
        "tools/packaging/check_dist.py",
        "tools/packaging/smoke_test.py",
        "tools/ci/ci_wheel.sh",
    ):
        text = (ROOT / script).read_text()
        assert "from tools.buildsys import archs" in text, script
        assert "NAMED_ARCHS" not in text and '"Hopper"' not in text, f"{script} has its own table"
    assert (
        "tools/buildsys/archs.py default"
        in (ROOT / "tools" / "packaging" / "build_wheel.sh").read_text()
    )


def test_the_release_tools_parse_like_the_build():
    from tools.packaging import check_dist, smoke_test

    for text in ("8.0,9.0", "7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX", "Hopper 8.0"):
        sass, ptx = check_dist.parse_arch_list(text)
        assert sass | ptx == set(archs.targets(text)) == smoke_test.targets_of(text)


def test_check_dist_reads_the_build_record_the_build_writes():
    """check_dist reads _build_info.py as the build writes it (a typed assignment broke it once:
    CI's wheel check stopped with a bare StopIteration)."""
    from tools.buildsys import command
    from tools.packaging import check_dist

    info = {"version": "0.1.0+cu130torch2.13", "cuda_arch_list": "9.0+PTX", "ops": {"relu": {}}}
    assert check_dist.read_build_info(command.build_info_text(info)) == info
    assert check_dist.read_build_info("BUILD_INFO = {'version': '1'}\n") == {"version": "1"}
    assert check_dist.read_build_info("OTHER = 1\n") is None


def test_build_wheel_reads_the_compile_count_that_the_build_logs(capsys, tmp_path):
    """build_wheel.sh --reuse-objects fails when the build compiled anything; it reads that from
    the line run_ninja logs ("lltm_ext build: compiled N files in ..."), which keeps that form."""
    from tools.buildsys import command

    ninja = shutil.which("ninja")
    if ninja is None:
        pytest.skip("ninja is not installed")
    (tmp_path / "build.ninja").write_text("rule touch\n  command = touch $out\nbuild a: touch\n")
    command.run_ninja(tmp_path, 1, False, tmp_path / "log")
    command.run_ninja(tmp_path, 1, False, tmp_path / "log")  # up to date: nothing to do
    logged = re.findall(r"^lltm_ext build: compiled (\d+) files", capsys.readouterr().out, re.M)
    assert logged == ["1", "0"]
    script = (ROOT / "tools" / "packaging" / "build_wheel.sh").read_text()
    assert "s/^lltm_ext build: compiled \\([0-9]*\\) files.*/\\1/p" in script


def test_check_dist_compares_an_sdist_with_the_tree_a_wheel_is_built_in(tmp_path):
    """`check_dist.py sdist --same-as DIR` (build_wheel.sh --reuse-objects): every file of the
    sdist but the metadata its build writes is DIR's, byte for byte."""
    import io
    import tarfile

    from tools.packaging import check_dist

    tree = tmp_path / "tree"
    (tree / "src" / "relu").mkdir(parents=True)
    (tree / "src" / "relu" / "relu.cpp").write_text("int x;\n")
    (tree / "setup.py").write_text("setup()\n")
    files = {
        "src/relu/relu.cpp": b"int x;\n",
        "setup.py": b"setup()\n",
        "PKG-INFO": b"Name: lltm_ext\n",
        "setup.cfg": b"[egg_info]\n",
        "lltm_ext.egg-info/SOURCES.txt": b"setup.py\n",
    }

    def sdist(extra: dict[str, bytes]) -> Path:
        path = tmp_path / "lltm_ext-0.1.0.tar.gz"
        with tarfile.open(path, "w:gz") as tf:
            for name, data in {**files, **extra}.items():
                member = tarfile.TarInfo(f"lltm_ext-0.1.0/{name}")
                member.size = len(data)
                tf.addfile(member, io.BytesIO(data))
        return path

    def differences(path: Path) -> list[str]:
        with tarfile.open(path) as tf:
            return check_dist.sdist_differences(tf, "lltm_ext-0.1.0/", tree)

    assert differences(sdist({})) == []  # PKG-INFO, setup.cfg and the egg-info are the build's
    changed = sdist({"src/relu/relu.cpp": b"int y;\n", "src/relu/new.cu": b"//\n"})
    assert differences(changed) == ["src/relu/relu.cpp (differs)", "src/relu/new.cu (missing here)"]


# --------------------------------------------------------------------------------------------
# Knobs, sources, parallelism, version.
# --------------------------------------------------------------------------------------------


def test_knobs():
    assert config.tristate("LLTM_EXT_CUDA", None) == "auto"
    assert config.tristate("LLTM_EXT_CUDA", "ON") == "1"
    assert config.tristate("LLTM_EXT_CUDA", "false") == "0"
    with pytest.raises(config.BuildConfigError, match="LLTM_EXT_CUDA must be auto, 1 or 0"):
        config.tristate("LLTM_EXT_CUDA", "cuda")
    assert config.flag("LLTM_EXT_DEBUG", None) is False and config.flag("X", "yes") is True
    assert (
        config.positive_int("MAX_JOBS", " 4 ") == 4 and config.positive_int("MAX_JOBS", "") is None
    )
    with pytest.raises(config.BuildConfigError, match="MAX_JOBS must be a positive integer"):
        config.positive_int("MAX_JOBS", "0")


def test_op_discovery_and_sources(tmp_path):
    for name in ("b/b.cpp", "b/b_cpu.cpp", "b/b_cuda.cu", "b/b_cuda_host.cpp", "a/a.cpp", "c/x.h"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert config.discover_ops(tmp_path) == ["a", "b"]  # c has no binding
    assert config.discover_ops(tmp_path, " b ,") == ["b"]
    with pytest.raises(config.BuildConfigError, match=r"LLTM_EXT_OPS names \['z'\]"):
        config.discover_ops(tmp_path, "b,z")
    src = config.op_sources(tmp_path / "b")
    assert src.binding.name == "b.cpp"
    assert [p.name for p in src.cpu] == ["b_cpu.cpp"]
    assert [p.name for p in src.cuda] == ["b_cuda.cu", "b_cuda_host.cpp"]
    assert src.uses == ()


def _tree(root, names):
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("# the cell's kernels\n" if name.endswith("uses.txt") else "")


def test_op_folders_with_subfolders_and_uses(tmp_path):
    """Sources in subfolders belong to the op; uses.txt names the op folders whose kernels the
    module links: compiled once, by their own module where the build has it, else here."""
    _tree(tmp_path, ["a/a.cpp", "a/a_cpu.cpp", "a/a_cuda.cu", "a/a_cuda_host.cpp"])
    _tree(tmp_path, ["s/s.cpp", "s/k1/k1.cu", "s/k2/k2.cu", "s/s_cuda_host.cpp", "s/k1/x.cuh"])
    (tmp_path / "s/uses.txt").write_text("# the cell\na  # its kernels\n")
    src = {op: config.op_sources(tmp_path / op) for op in ("a", "s")}
    assert [p.relative_to(tmp_path).as_posix() for p in src["s"].cuda] == [
        "s/k1/k1.cu",
        "s/k2/k2.cu",
        "s/s_cuda_host.cpp",
    ]
    assert src["s"].uses == ("a",) and src["s"].cpu == ()

    def names(parts):
        return (
            [p.relative_to(tmp_path).as_posix() for p in parts.compiled],
            [(m, p.relative_to(tmp_path).as_posix()) for m, p in parts.linked],
        )

    a_all = ["a/a_cpu.cpp", "a/a_cuda.cu", "a/a_cuda_host.cpp"]
    # Both built with CUDA: s links a's objects.
    both = {"a": True, "s": True}
    compiled, linked = names(config.module_sources("s", src, both, cuda=True))
    assert compiled == ["s/s.cpp", "s/k1/k1.cu", "s/k2/k2.cu", "s/s_cuda_host.cpp"]
    assert linked == [("_a", p) for p in a_all]
    # a not in this build (LLTM_EXT_OPS=s): s compiles a's kernels itself.
    compiled, linked = names(config.module_sources("s", src, {"s": True}, cuda=True))
    assert compiled[-3:] == a_all and linked == []
    # The CPU twin of s: its binding only, a's CPU kernels linked from wherever they were built.
    assert names(config.module_sources("s", src, both, cuda=False, twin=True)) == (
        ["s/s.cpp"],
        [("_a", "a/a_cpu.cpp")],
    )
    assert names(config.module_sources("s", src, {"s": True}, cuda=False, twin=True)) == (
        ["s/s.cpp"],
        [("_s", "a/a_cpu.cpp")],
    )
    # A CPU-only build: CPU kernels only.
    assert names(config.module_sources("s", src, {"a": False, "s": False}, cuda=False)) == (
        ["s/s.cpp"],
        [("_a", "a/a_cpu.cpp")],
    )
    # `a cpu`: a's CPU kernels alone, linked from a's module whatever its kind, or compiled here.
    (tmp_path / "s/uses.txt").write_text("a cpu  # its CPU kernels\n")
    src["s"] = config.op_sources(tmp_path / "s")
    assert src["s"].uses == ("a",) and src["s"].uses_cpu_only == {"a"}
    assert names(config.module_sources("s", src, both, cuda=True))[1] == [("_a", "a/a_cpu.cpp")]
    assert names(config.module_sources("s", src, {"a": False, "s": True}, cuda=True))[1] == [
        ("_a", "a/a_cpu.cpp")
    ]
    assert names(config.module_sources("s", src, {"s": True}, cuda=True))[0][-1] == "a/a_cpu.cpp"
    (tmp_path / "s/uses.txt").write_text("a cuda\n")
    with pytest.raises(config.BuildConfigError, match="a line is an op folder, or an op folder"):
        config.op_sources(tmp_path / "s")
    # uses.txt must name another op folder, which names none itself.
    (tmp_path / "s/uses.txt").write_text("z\n")
    with pytest.raises(config.BuildConfigError, match="names 'z', which is not another op folder"):
        config.op_sources(tmp_path / "s")
    (tmp_path / "s/uses.txt").write_text("a\n")
    (tmp_path / "a/uses.txt").write_text("s\n")
    with pytest.raises(config.BuildConfigError, match=r"has a uses\.txt of its own"):
        config.op_sources(tmp_path / "s")


def test_real_op_folders_split_cleanly():
    found = config.discover_ops(ROOT / "src")
    for op in found:
        src = config.op_sources(ROOT / "src" / op)
        assert src.cpu or src.uses, f"src/{op} has no CPU kernels and uses no op's"
        assert set(src.uses) <= set(found)
        for cpu_file in src.cpu:  # CPU twins link the CUDA module's objects of these files
            assert "WITH_CUDA" not in cpu_file.read_text(), f"{cpu_file} depends on WITH_CUDA"


def test_parallelism():
    assert config.parallelism(2, 20.0, 7) == (2, 1)
    assert config.parallelism(16, 100.0, 1) == (16, 1)
    jobs, threads = config.parallelism(16, 100.0, 7)
    assert jobs == 16 and 1 <= threads <= 7
    assert config.parallelism(16, 5.0, 7) == (2, 1)  # memory-bound: ~2 GiB per compiler
    assert config.parallelism(8, 64.0, 7, jobs=3, threads=2) == (3, 2)


def test_version_label():
    kw = dict(torch_version="2.13.0+cu130", from_sdist=False)
    assert config.version_label(None, cuda="13.0", **kw) == "cu130torch2.13"
    assert config.version_label("auto", cuda=None, **kw) == "cputorch2.13"
    assert config.version_label("none", cuda="13.0", **kw) == ""
    assert config.version_label("+mylabel.1", cuda="13.0", **kw) == "mylabel.1"
    assert config.version_label(None, cuda="13.0", torch_version="2.13.0", from_sdist=True) == ""
    with pytest.raises(config.BuildConfigError):
        config.version_label("bad label", cuda=None, **kw)


# --------------------------------------------------------------------------------------------
# Compiler choice, failure summary, the ninja driver's pieces.
# --------------------------------------------------------------------------------------------


def test_compiler_choice_keeps_working_compilers_and_replaces_static_ones(monkeypatch):
    static = {"c++", "/opt/gcc/bin/g++"}

    def probe(cxx):
        return f"{cxx} links libstdc++ statically" if cxx in static else None

    monkeypatch.setattr(toolchain, "SYSTEM_COMPILERS", (("/bin/sh", "/bin/true"),))
    # A working compiler, set or default, is kept as it is.
    assert toolchain.choose_compiler({"CXX": "clang++"}, ["c++"], probe).cxx is None
    kept = toolchain.CompilerChoice(None, None, None)
    assert toolchain.choose_compiler({}, ["g++"], probe) == kept
    # A static default is replaced by a system compiler that works, and the note says why.
    choice = toolchain.choose_compiler({}, ["c++"], probe)
    assert choice.cxx == "/bin/sh" and choice.cc == "/bin/true"
    assert "statically" in choice.note and "CXX=/bin/sh" in choice.note
    # So is a CXX set machine-wide to one (as on the GPU image: /opt/gcc/bin/g++).
    choice = toolchain.choose_compiler({"CXX": "/opt/gcc/bin/g++"}, None, probe)
    assert choice.cxx == "/bin/sh" and "as set in the environment" in choice.note
    # Nothing works: nothing replaced, and the note says so (the link-time check then fails).
    bad = toolchain.choose_compiler({}, ["c++"], lambda cxx: "broken")
    assert bad.cxx is None and "no system compiler works" in bad.note


def test_compiler_probe_on_this_machine():
    assert toolchain.probe_compiler("c++") is None  # the system compiler links libstdc++ shared
    assert "not on PATH" in toolchain.probe_compiler("no-such-compiler-here")


def test_failure_summary_dedupes_and_hints():
    err = (
        "ptxas /tmp/tmpxft_0001a2b3_00000000-6_gemm_cuda.compute_75.ptx, line {}; error   : "
        "Feature 'cp.async' requires .target sm_80 or higher"
    )
    log = "\n".join(
        ["[1/3] c++ -c a.cpp -o a.o", "FAILED: /b/obj/_gemm/src/gemm/gemm_cuda.o"]
        + [err.format(500 + i) for i in range(2476)]
        + ["ninja: build stopped: subcommand failed."]
    )
    summary = config.summarize_failure(log)
    assert "failed to compile: gemm_cuda.o" in summary
    assert "[x2476]" in summary and len(summary.splitlines()) <= 4
    assert "hint:" in summary and "TORCH_CUDA_ARCH_LIST" in summary
    assert "MAX_JOBS" in config.summarize_failure("FAILED: x.o\nc++: fatal error: Killed signal")


def test_status_lines_are_shortened(tmp_path):
    line = (
        "[3/20] /usr/local/cuda/bin/nvcc -MD -MF /b/obj/t/_gemm/src/gemm/k.o.d -I/x -c -c "
        "/home/u/lltm/src/gemm/k.cu -o /b/obj/t/_gemm/src/gemm/k.o -O3"
    )
    assert short_status(line) == "[3/20] nvcc src/gemm/k.cu (_gemm)"
    assert short_status("warning: something") is None
    write_top_ninja(tmp_path / "build.ninja", [tmp_path / "_a" / "build.ninja"])
    assert f"subninja {tmp_path}/_a/build.ninja" in (tmp_path / "build.ninja").read_text()


def source_tree_copy(dest: Path) -> Path:
    """A copy of the source tree as git would commit it (or, outside a git checkout, less the
    build outputs and environments), in `dest`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.split("\0")):
            if (ROOT / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, dest / name)
        return dest
    ignore = shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.so", "*.egg-info", "__pycache__"
    )
    shutil.copytree(ROOT, dest, ignore=ignore, dirs_exist_ok=True)
    return dest


def test_importing_setup_py_writes_nothing(tmp_path):
    """pip's metadata passes import setup.py: the source tree must not change (the build record
    and the header overlay are written by build_ext). Run in a copy of the tree, which no other
    test (in parallel) writes to."""
    tree = source_tree_copy(tmp_path / "src")

    def files() -> set[tuple[str, int, int]]:
        # Python's bytecode caches may appear (setup.py imports tools/buildsys).
        return {
            (str(p.relative_to(tree)), p.stat().st_size, p.stat().st_mtime_ns)
            for p in tree.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }

    before = files()
    assert any(name == "setup.py" for name, _, _ in before)
    out = subprocess.run(
        [sys.executable, "setup.py", "--version"],
        cwd=tree,
        capture_output=True,
        text=True,
        env={**os.environ, "LLTM_EXT_CUDA": "0"},
    )
    assert out.returncode == 0, out.stderr
    assert re.fullmatch(r"\d+\.\d+\.\d+(\+\w+\.?\w*)?", out.stdout.strip().splitlines()[-1])
    after = files()
    assert after == before, sorted(after ^ before)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_settings_table_compiles_as_cpp17_and_refuses_an_unknown_name(tmp_path):
    """torch before 2.12 builds extensions as C++17 (torch 2.11 on the GPU machine): the settings
    table must compile there too, and an unknown name must not compile in either standard."""
    good = tmp_path / "good.cpp"
    good.write_text(
        '#include "common/settings.h"\n'
        'constexpr lltm_ext::settings::ChoiceKey kKey = "LLTM_EXT_CELL_PATH";\n'
        "int main() { return static_cast<int>(kKey.index); }\n"
    )
    bad = tmp_path / "bad.cpp"
    bad.write_text(good.read_text().replace("LLTM_EXT_CELL_PATH", "LLTM_EXT_CELL_PAHT"))
    for std in ("c++17", "c++20"):
        cmd = ["g++", f"-std={std}", "-fsyntax-only", "-I", str(ROOT / "src")]
        ok = subprocess.run([*cmd, str(good)], capture_output=True, text=True)
        assert ok.returncode == 0, f"{std}: {ok.stderr}"
        refused = subprocess.run([*cmd, str(bad)], capture_output=True, text=True)
        assert refused.returncode != 0 and "not_a_setting" in refused.stderr, std


# --------------------------------------------------------------------------------------------
# Generated code.
# --------------------------------------------------------------------------------------------


def test_wgmma_headers_match_their_generator_and_the_planner():
    """src/gemm/tiles/sm90_wgmma.cuh and src/common/sm90_wgmma_tf32.cuh are what
    tools/codegen/sm90_wgmma.py writes (where clang-format is here to format them), with the widths
    of gemm_tc_plan.h's kWgmmaWideTiles and kWgmmaTallTiles, which the GPU tests force
    (tests/test_gemm_tensor_core.py's WIDE_TILES and TALL_TILES)."""
    from tools.codegen import sm90_wgmma

    plan_h = (ROOT / "src/gemm/gemm_tc_plan.h").read_text()
    found = re.search(r"kWgmmaWideTiles = \{([0-9, ]+)\}", plan_h)
    assert found, "gemm_tc_plan.h: kWgmmaWideTiles not found"
    planner = tuple(int(v) for v in found.group(1).split(","))
    assert planner == sm90_wgmma.WIDE_WIDTHS
    assert set(planner) <= set(sm90_wgmma.HALF_WIDTHS) & set(sm90_wgmma.TF32_WIDTHS)
    tests = (ROOT / "tests/test_gemm_tensor_core.py").read_text()
    assert f"WIDE_TILES = {planner}" in tests
    found = re.search(r"kWgmmaTallTiles = \{([0-9, ]+)\}", plan_h)
    assert found, "gemm_tc_plan.h: kWgmmaTallTiles not found"
    tall = tuple(int(v) for v in found.group(1).split(","))
    assert tall == sm90_wgmma.TALL_WIDTHS and set(tall) <= set(sm90_wgmma.HALF_WIDTHS)
    assert f"TALL_TILES = {tall}" in tests
    half = sm90_wgmma.HALF_HEADER.read_text()
    tf32 = sm90_wgmma.TF32_HEADER.read_text()
    for width in sm90_wgmma.HALF_WIDTHS:
        assert f"m64n{width}k16.f32.bf16.bf16" in half and f"m64n{width}k16.f32.f16.f16" in half
    for width in sm90_wgmma.TF32_WIDTHS:
        assert f"m64n{width}k8.f32.tf32.tf32" in tf32
    clang_format = shutil.which("clang-format")
    if clang_format is None:
        pytest.skip("clang-format is not on PATH: the headers' text is not compared")
    assert sm90_wgmma.main(["--check", "--clang-format", clang_format]) == 0
