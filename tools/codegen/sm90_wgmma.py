"""Writes the wgmma headers: src/gemm/tiles/sm90_wgmma.cuh and src/common/sm90_wgmma_tf32.cuh.

wgmma.mma_async m64nNk16 (bf16, f16) and m64nNk8 (tf32) keep N / 2 float32 accumulators a thread,
each an operand of the inline PTX, so the operand lists run to 128 entries. This writes them out
for every width the kernels use, then formats the headers with clang-format.

    python tools/codegen/sm90_wgmma.py            # write the headers
    python tools/codegen/sm90_wgmma.py --check    # exit 1 if a header differs from what it writes
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
HALF_HEADER = ROOT / "src" / "gemm" / "tiles" / "sm90_wgmma.cuh"
TF32_HEADER = ROOT / "src" / "common" / "sm90_wgmma_tf32.cuh"
# The tile widths: the GEMM's 64, 128, 256, gemm_tc_plan.h's kWgmmaWideTiles (144, 168, 192) and
# kWgmmaTallTiles (the 256-row tiles' widths, 16-bit only; the test in tests/test_build_tools.py
# checks both), and its narrow tiles, 16 and 32, in 16-bit types only.
HALF_WIDTHS = (16, 32, 64, 128, 144, 152, 168, 192, 256)
TF32_WIDTHS = (64, 128, 144, 168, 192, 256)
WIDE_WIDTHS = (144, 168, 192)
TALL_WIDTHS = (152,)

HALF_TOP = """\
// wgmma.mma_async m64nNk16 with float32 accumulators for 16-bit inputs (bf16, f16), N = {widths},
// both operands from shared memory (matrix descriptors): the inline PTX with its operand lists
// written out in full (N / 2 accumulator registers per thread). Written by
// tools/codegen/sm90_wgmma.py; edit that, not this. sm_90a only: include it from code compiled
// under LLTM_EXT_SM90A (common/sm90_ptx.cuh).
#pragma once

#include <cstdint>

namespace lltm_ext::gemm_tiles::sm90 {{

// d (64 x N per warpgroup, the wgmma accumulator fragment) = A B + (scale_d ? d : 0), A (64 x 16)
// and B (16 x N) in shared memory as desc_a / desc_b describe them; TRANS_A / TRANS_B: A is M-major
// / B is N-major (1) or K-major (0). Asynchronous: wgmma_commit / wgmma_wait complete it.
template <int N, bool BF16>
struct Wgmma;
"""

TF32_TOP = """\
// wgmma.mma_async m64nNk8 with float32 accumulators for tf32 inputs (float32 in shared memory,
// its low 13 mantissa bits ignored), N = {widths}, both operands K-major from shared memory: the
// inline PTX with its operand lists written out in full. Written by tools/codegen/sm90_wgmma.py;
// edit that, not this. sm_90a only (see gemm/tiles/sm90_wgmma.cuh).
#pragma once

#include <cstdint>

namespace lltm_ext::cuda::sm90 {{

// d (64 x N per warpgroup) = A B + (scale_d ? d : 0), A (64 x 8) and B (8 x N) K-major in shared
// memory as desc_a / desc_b describe them. Asynchronous, like Wgmma.
template <int N>
struct WgmmaTf32;
"""


def specialization(width: int, kind: str) -> str:
    """One specialization: kind "bf16" / "f16" (Wgmma<width, BF16>, either major-ness, k16) or
    "tf32" (WgmmaTf32<width>, K-major, k8)."""
    n = width // 2
    names = ", ".join(f"%{i}" for i in range(n))
    operands = ", ".join(f'"+f"(d[{i}])' for i in range(n))
    half = kind != "tf32"
    head = (
        f"struct Wgmma<{width}, {'true' if kind == 'bf16' else 'false'}> {{\n"
        "  template <int TRANS_A, int TRANS_B>\n"
        if half
        else f"struct WgmmaTf32<{width}> {{\n"
    )
    shape = f"m64n{width}k16.f32.{kind}.{kind}" if half else f"m64n{width}k8.f32.tf32.tf32"
    tail = f", %{n + 3}, %{n + 4}" if half else ""
    inputs = '"l"(desc_a), "l"(desc_b), "r"(scale_d)'
    inputs += ', "n"(TRANS_A), "n"(TRANS_B)' if half else ""
    signature = (
        f"static __device__ __forceinline__ void mma(float (&d)[{n}], uint64_t desc_a, "
        "uint64_t desc_b, int scale_d)"
    )
    return f"""
template <>
{head}  {signature} {{
    asm volatile(
        "{{\\n"
        ".reg .pred p;\\n"
        "setp.ne.b32 p, %{n + 2}, 0;\\n"
        "wgmma.mma_async.sync.aligned.{shape} "
        "{{{names}}}, "
        "%{n}, %{n + 1}, p, 1, 1{tail};\\n"
        "}}\\n"
        : {operands}
        : {inputs});
  }}
}};
"""


def listed(widths: tuple[int, ...]) -> str:
    """'16, 64, 128 or 256'."""
    return ", ".join(str(w) for w in widths[:-1]) + f" or {widths[-1]}"


def render() -> dict[pathlib.Path, str]:
    """Each header's text, before formatting."""
    half = HALF_TOP.format(widths=listed(HALF_WIDTHS))
    for width in HALF_WIDTHS:
        half += specialization(width, "bf16") + specialization(width, "f16")
    half += "\n}  // namespace lltm_ext::gemm_tiles::sm90\n"
    tf32 = TF32_TOP.format(widths=listed(TF32_WIDTHS))
    for width in TF32_WIDTHS:
        tf32 += specialization(width, "tf32")
    tf32 += "\n}  // namespace lltm_ext::cuda::sm90\n"
    return {HALF_HEADER: half, TF32_HEADER: tf32}


def formatted(text: str, path: pathlib.Path, clang_format: str) -> str:
    """`text` through clang-format with the repository's style, as if it were `path`."""
    return subprocess.run(
        [clang_format, f"--assume-filename={path}", "--style=file"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout


def main(argv: list[str] | None = None) -> int:
    """Write the headers, or with --check compare them with what would be written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--clang-format", default="clang-format", help="the formatter to run")
    args = parser.parse_args(argv)
    status = 0
    for path, text in render().items():
        text = formatted(text, path, args.clang_format)
        if not args.check:
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            print(f"{path.relative_to(ROOT)} differs from tools/codegen/sm90_wgmma.py's output")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
