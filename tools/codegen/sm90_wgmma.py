"""Writes src/gemm/tiles/sm90_wgmma_wide.cuh: wgmma instructions of the GEMM's extra tile widths.

The Hopper GEMM's block tiles 128 x BN for BN past the powers of two (the widths that fit a grid's
tiles to whole rounds of SMs) need wgmma m64nBNk16 / m64nBNk8 with BN / 2 float32 accumulators a
thread, each an operand of the inline PTX. This writes those operand lists out, in the form of
sm90_wgmma.cuh and common/sm90_wgmma_tf32.cuh, then formats the file with clang-format.

    python tools/codegen/sm90_wgmma.py            # write the header
    python tools/codegen/sm90_wgmma.py --check    # exit 1 if the header differs from what it writes
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
HEADER = ROOT / "src" / "gemm" / "tiles" / "sm90_wgmma_wide.cuh"
# The extra widths: src/gemm/gemm_tc_plan.h's kWgmmaWideTiles (tests/test_build_tools.py checks).
WIDTHS = (192,)


def operand_list(n: int) -> tuple[str, str]:
    """The accumulators' PTX names ("%0, ... %{n-1}") and their C++ operands for N / 2 = n."""
    names = ", ".join(f"%{i}" for i in range(n))
    operands = ", ".join(f'"+f"(d[{i}])' for i in range(n))
    return names, operands


def half_type(width: int, bf16: bool) -> str:
    """Wgmma<width, bf16>: both operands from shared memory, either major-ness (16-bit)."""
    n = width // 2
    names, operands = operand_list(n)
    kind = "bf16" if bf16 else "f16"
    return f"""
template <>
struct Wgmma<{width}, {"true" if bf16 else "false"}> {{
  template <int TRANS_A, int TRANS_B>
  static __device__ __forceinline__ void mma(float (&d)[{n}], uint64_t desc_a, uint64_t desc_b,
                                             int scale_d) {{
    asm volatile(
        "{{\\n"
        ".reg .pred p;\\n"
        "setp.ne.b32 p, %{n + 2}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{width}k16.f32.{kind}.{kind} "
        "{{{names}}}, "
        "%{n}, %{n + 1}, p, 1, 1, %{n + 3}, %{n + 4};\\n"
        "}}\\n"
        : {operands}
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
  }}
}};
"""


def tf32_type(width: int) -> str:
    """WgmmaTf32<width>: both operands K-major from shared memory."""
    n = width // 2
    names, operands = operand_list(n)
    return f"""
template <>
struct WgmmaTf32<{width}> {{
  static __device__ __forceinline__ void mma(float (&d)[{n}], uint64_t desc_a, uint64_t desc_b,
                                             int scale_d) {{
    asm volatile(
        "{{\\n"
        ".reg .pred p;\\n"
        "setp.ne.b32 p, %{n + 2}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{width}k8.f32.tf32.tf32 "
        "{{{names}}}, "
        "%{n}, %{n + 1}, p, 1, 1;\\n"
        "}}\\n"
        : {operands}
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }}
}};
"""


def render() -> str:
    """The header, before formatting."""
    widths = ", ".join(str(w) for w in WIDTHS)
    parts = [
        "// wgmma.mma_async for the GEMM's extra block tile widths (N = "
        f"{widths}): m64nNk16 for bf16 / f16\n"
        "// (Wgmma<N, BF16>, as in sm90_wgmma.cuh) and m64nNk8 for tf32 (WgmmaTf32<N>, as in\n"
        "// common/sm90_wgmma_tf32.cuh), float32 accumulators. Written by\n"
        "// tools/codegen/sm90_wgmma.py; edit that, not this. sm_90a only: include it from code\n"
        "// compiled under LLTM_EXT_SM90A.\n",
        "#pragma once\n\n#include <cstdint>\n\n",
        '#include "common/sm90_wgmma_tf32.cuh"\n#include "gemm/tiles/sm90_wgmma.cuh"\n\n',
        "namespace lltm_ext::gemm_tiles::sm90 {\n",
    ]
    for width in WIDTHS:
        parts.append(half_type(width, True))
        parts.append(half_type(width, False))
    parts.append(
        "\n}  // namespace lltm_ext::gemm_tiles::sm90\n\nnamespace lltm_ext::cuda::sm90 {\n"
    )
    for width in WIDTHS:
        parts.append(tf32_type(width))
    parts.append("\n}  // namespace lltm_ext::cuda::sm90\n")
    return "".join(parts)


def formatted(text: str, clang_format: str) -> str:
    """`text` through clang-format with the repository's style, as if it were HEADER."""
    return subprocess.run(
        [clang_format, f"--assume-filename={HEADER}", "--style=file"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout


def main(argv: list[str] | None = None) -> int:
    """Write the header, or with --check compare it with what would be written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--clang-format", default="clang-format", help="the formatter to run")
    args = parser.parse_args(argv)
    text = formatted(render(), args.clang_format)
    if args.check:
        same = HEADER.exists() and HEADER.read_text() == text
        if not same:
            print(f"{HEADER.relative_to(ROOT)} differs from tools/codegen/sm90_wgmma.py's output")
        return 0 if same else 1
    HEADER.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
