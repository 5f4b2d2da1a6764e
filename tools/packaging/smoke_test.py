#!/usr/bin/env python3
"""Smoke test of an installed lltm_ext, run in a fresh environment from outside the source tree.

    python smoke_test.py [--expect-version V] [--expect-cuda yes|no|any] [--arch-list LIST]
                         [--prefix DIR] [--require-gpu]

1. `import lltm_ext` loads the installed package (under --prefix), not the source tree's.
2. `python -m lltm_ext info` and `info --json` run; every op's compiled module loads; the version,
   and the CUDA kernels and their targets (from --arch-list, as TORCH_CUDA_ARCH_LIST reads), are
   the ones asked for.
3. The LLTM op on CPU matches a pure-PyTorch reference, forward and backward (float64, float32);
   other ops that mirror a torch function are compared with it.
4. Where torch sees a GPU and the build has CUDA kernels, the same on CUDA (--require-gpu: fail
   when there is no GPU).

Exit status 0 when all pass; otherwise 1, with what failed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[2]


class Smoke:
    def __init__(self) -> None:
        self.passed = 0
        self.failed: list[str] = []

    def check(self, ok: bool, what: str, detail: str = "") -> bool:
        if ok:
            self.passed += 1
            print(f"  ok    {what}", flush=True)
        else:
            self.failed.append(f"{what}: {detail}" if detail else what)
            print(f"  FAIL  {what}{': ' + detail if detail else ''}", flush=True)
        return ok


def targets_of(arch_list: str) -> set[str]:
    """'8.0;9.0+PTX' -> {'sm_80', 'sm_90', 'compute_90'}: the project's one reading of an arch
    list (tools/buildsys/archs.py in the source tree this script belongs to)."""
    sys.path.append(str(SOURCE_ROOT))  # after the installed lltm_ext
    from tools.buildsys import archs

    return set(archs.targets(arch_list))


def lltm_reference(input, weights, bias, old_h, old_cell):
    """The LLTM cell in plain PyTorch (the extension tutorial's Python version)."""
    import torch
    import torch.nn.functional as F

    X = torch.cat([old_h, input], dim=1)
    gates = X @ weights.t() + bias.reshape(-1)
    z_i, z_o, z_c = gates.chunk(3, dim=1)
    new_cell = old_cell + F.elu(z_c) * torch.sigmoid(z_i)
    new_h = torch.tanh(new_cell) * torch.sigmoid(z_o)
    return new_h, new_cell


def check_lltm(smoke: Smoke, device: str) -> None:
    import torch

    import lltm_ext

    batch, features, state = 5, 7, 6
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        gen = torch.Generator().manual_seed(0)

        def rand(*shape, gen=gen, dtype=dtype):
            return torch.randn(*shape, generator=gen, dtype=dtype).to(device).requires_grad_()

        args = (
            rand(batch, features),
            rand(3 * state, state + features),
            rand(3 * state),
            rand(batch, state),
            rand(batch, state),
        )
        ref_args = [a.detach().double().requires_grad_() for a in args]
        out = lltm_ext.lltm(*args)
        ref = lltm_reference(*ref_args)
        out_d, ref_d = [o.detach().double() for o in out], [r.detach() for r in ref]
        name = f"lltm forward, {device} {str(dtype)[6:]}"
        ok = all(
            torch.allclose(o, r, rtol=tol, atol=tol) for o, r in zip(out_d, ref_d, strict=True)
        )
        err = max(float((o - r).abs().max()) for o, r in zip(out_d, ref_d, strict=True))
        smoke.check(ok, name, f"max abs error {err:.3g}")
        grads_out = [torch.randn(batch, state, generator=gen, dtype=dtype).to(device) for _ in out]
        got = torch.autograd.grad(out, args, grads_out)
        want = torch.autograd.grad(ref, ref_args, [g.double() for g in grads_out])
        ok = all(
            torch.allclose(g.double(), w, rtol=tol, atol=tol)
            for g, w in zip(got, want, strict=True)
        )
        err = max(float((g.double() - w).abs().max()) for g, w in zip(got, want, strict=True))
        smoke.check(ok, f"lltm backward, {device} {str(dtype)[6:]}", f"max abs error {err:.3g}")


def check_other_ops(smoke: Smoke, device: str, built_ops: set[str]) -> None:
    """Ops that mirror a torch function, where present; a different signature is skipped."""
    import torch

    import lltm_ext

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1000, generator=gen).mul_(4).to(device)
    a = torch.randn(33, 17, generator=gen, dtype=torch.float64).to(device)
    b = torch.randn(17, 9, generator=gen, dtype=torch.float64).to(device)
    cases = [  # (op, function, arguments, torch's result)
        ("relu", "relu", (x,), torch.relu(x)),
        ("sigmoid", "sigmoid", (x,), torch.sigmoid(x)),
        ("round_ste", "round_ste", (x,), torch.round(x)),  # forward: round half to even
        ("gemm", "gemm", (a, b), a @ b),
    ]
    for op, name, args, expected in cases:
        fn = getattr(lltm_ext, name, None)
        if op not in built_ops or not callable(fn):
            continue
        try:
            got = fn(*args)
        except TypeError as exc:  # another signature than torch's: nothing to compare here
            print(f"  skip  {name} on {device}: {exc}", flush=True)
            continue
        except Exception as exc:
            smoke.check(False, f"{name} runs on {device}", f"{type(exc).__name__}: {exc}")
            continue
        got = got[0] if isinstance(got, tuple) else got
        ok = torch.allclose(got.double(), expected.double(), rtol=1e-5, atol=1e-6)
        smoke.check(ok, f"{name} vs torch, {device}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expect-version", help="the version the installed lltm_ext must report")
    parser.add_argument("--expect-cuda", choices=["yes", "no", "any"], default="any")
    parser.add_argument("--arch-list", help="TORCH_CUDA_ARCH_LIST the build was asked for")
    parser.add_argument("--prefix", help="the environment lltm_ext must be imported from")
    parser.add_argument("--require-gpu", action="store_true", help="fail without a CUDA GPU")
    args = parser.parse_args(argv)
    smoke = Smoke()

    print("smoke test: import", flush=True)
    import torch

    import lltm_ext

    where = Path(lltm_ext.__file__).resolve()
    smoke.check(
        where.parent != SOURCE_ROOT / "lltm_ext",
        "lltm_ext is not the source tree's",
        f"imported from {where}",
    )
    if args.prefix:
        prefix = Path(args.prefix).resolve()
        smoke.check(prefix in where.parents, f"lltm_ext imported from {prefix}", f"got {where}")

    print("smoke test: python -m lltm_ext info", flush=True)
    table = subprocess.run(
        [sys.executable, "-m", "lltm_ext", "info"], capture_output=True, text=True
    )
    print("\n".join("    " + line for line in (table.stdout + table.stderr).splitlines()))
    smoke.check(table.returncode == 0, "python -m lltm_ext info exits 0", table.stderr[-500:])
    raw = subprocess.run(
        [sys.executable, "-m", "lltm_ext", "info", "--json"], capture_output=True, text=True
    )
    try:
        info = json.loads(raw.stdout)
    except json.JSONDecodeError:
        smoke.check(False, "python -m lltm_ext info --json prints JSON", raw.stderr[-500:])
        return report(smoke)
    built_ops = set(info["built"].get("ops") or {})
    smoke.check(bool(built_ops), "the build record lists ops")
    for op in sorted(set(info["ops"]) - built_ops):  # a partial build (LLTM_EXT_OPS)
        print(f"  skip  op {op}: not in this build (LLTM_EXT_OPS)", flush=True)
    ops = {op: o for op, o in info["ops"].items() if op in built_ops}
    for op in sorted(built_ops):
        o = ops.get(op, {"error": f"no Python module lltm_ext/ops/{op}.py"})
        smoke.check(o.get("loaded", False), f"op {op}: compiled module loads", o.get("error", ""))
    if args.expect_version:
        smoke.check(
            info["version"] == args.expect_version,
            f"version is {args.expect_version}",
            f"got {info['version']}",
        )
    cuda_ops = {op for op, o in ops.items() if o.get("cuda")}
    if args.expect_cuda == "yes":
        smoke.check(bool(cuda_ops), "ops built with CUDA kernels", f"none of {sorted(ops)}")
    elif args.expect_cuda == "no":
        smoke.check(
            not cuda_ops,
            "no loaded op module has CUDA kernels (CPU-only build or torch)",
            f"{sorted(cuda_ops)}",
        )
    if cuda_ops:
        want = targets_of(args.arch_list or info["built"].get("cuda_arch_list") or "")
        built = set(info["built"].get("cuda_targets") or [])
        smoke.check(
            built == want,
            f"build record: CUDA targets {','.join(sorted(want))}",
            f"got {sorted(built)}",
        )
        for op in sorted(cuda_ops):
            got = set(filter(None, ops[op]["cuda_targets"].split(",")))
            smoke.check(
                got == want,
                f"op {op}: module reports CUDA targets {','.join(sorted(want))}",
                f"got {sorted(got)}",
            )

    print("smoke test: ops on CPU vs pure PyTorch", flush=True)
    if "lltm" in built_ops:
        check_lltm(smoke, "cpu")
    check_other_ops(smoke, "cpu", built_ops)

    gpu = torch.cuda.is_available()
    if args.require_gpu:
        smoke.check(gpu, "torch sees a CUDA GPU (--require-gpu)")
    if gpu and cuda_ops:
        cap = "".join(map(str, torch.cuda.get_device_capability()))
        targets = set(filter(None, ops[sorted(cuda_ops)[0]]["cuda_targets"].split(",")))
        runs = f"sm_{cap}" in targets or any(
            t.startswith("compute_") and int(t[8:].rstrip("af")) <= int(cap) for t in targets
        )
        print(f"smoke test: ops on CUDA ({torch.cuda.get_device_name()}, sm_{cap})", flush=True)
        if smoke.check(
            runs, f"the build has kernels for this GPU (sm_{cap})", f"targets {targets}"
        ):
            if "lltm" in built_ops:
                check_lltm(smoke, "cuda")
            check_other_ops(smoke, "cuda", built_ops)
    elif gpu:
        print("smoke test: a GPU is visible, but this build has no CUDA kernels: CPU only")
    else:
        print("smoke test: no CUDA GPU visible: CUDA kernels not run")
    return report(smoke)


def report(smoke: Smoke) -> int:
    if smoke.failed:
        print(
            f"smoke test FAILED: {len(smoke.failed)} of {smoke.passed + len(smoke.failed)} checks:"
        )
        for f in smoke.failed:
            print(f"  - {f}")
        return 1
    print(f"smoke test OK: all {smoke.passed} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
