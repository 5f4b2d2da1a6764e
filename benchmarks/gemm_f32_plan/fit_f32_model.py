"""Fits the float32 GEMM schedule heuristic's constants to measured plan times.

A Python mirror of src/gemm/gemm_heuristic.cpp's cost model, `estimate()` and `choose_tiles()`
without tail split-K (the plans measure_f32_plans.py times have none; keep the two in step: same
terms, same names), and a coordinate search over its constants that minimizes the loss: the mean
over shapes of log(measured time of the plan the model picks / best measured time among the plans).
Each step of the search tries every constant at each of FACTORS times its value (the least K per
split's multiple of BK at each of MIN_SPLIT_BKS) and takes the best single move; it stops when none
helps. A pick that was not measured (a split whose K / splits is under 64, which the model allows
from K / splits > 48 with the multiple at 4) counts as the nearest measured split of that config,
the largest one below it (`remapped` counts them), or with --unmeasured penalty as the shape's
slowest plan.

Prints, before (the constants as gemm_heuristic.cpp has them) and after the fit, on the fitted
file(s) and on the hold-out: the loss, the same over shapes with K > 48 only (shorter K moves to
another kernel), and the picked plan's speed relative to cuBLAS (ref_us / its time: geometric mean
and 10th percentile). Then the fitted constants as C++ to paste into gemm_heuristic.cpp, the range
of each over which the fitted loss stays the same, and the same fit with each config's rate also
depending on whether A is M-contiguous (layout's first letter 't'), then on whether both
operands' rows are 16-byte aligned: features the C++ heuristic does not have (it sees only
b_k_contig; on 128 shapes of seed 2 the alignment feature moved the held-out loss by under 0.01).

    python benchmarks/gemm_f32_plan/fit_f32_model.py f32_seed2.json --holdout f32_seed3.json
"""

import argparse
import json
import math
import statistics

# The candidates, their block tiles (gemm_configs.h) and resident blocks per SM on the H100 the
# data came from (the Tile<>s' MIN_BLOCKS: choose_tiles' gpu.blocks_per_sm).
CANDIDATES = (0, 1, 2, 3, 11, 12, 13, 14, 15)
TILES = {
    0: (64, 128, 16), 1: (128, 256, 16), 2: (128, 128, 16), 3: (64, 64, 16), 11: (256, 128, 16),
    12: (128, 128, 16), 13: (128, 64, 16), 14: (128, 32, 16), 15: (32, 128, 16),
}  # fmt: skip
BLOCKS_PER_SM = {0: 3, 1: 1, 2: 2, 3: 4, 11: 1, 12: 2, 13: 3, 14: 4, 15: 4}
SMS = 132
MAX_SPLITS = 64

# The constants as gemm_heuristic.cpp has them (the starting point of a fit). rate{c}:
# kF32CandidateRate (B row-major; 0: not a candidate), rate_bk{c}: kF32CandidateRateBK (B
# K-contiguous), fixed{c}: kF32CandidateFixedK (the per-block fixed work in K), min_split_bk: the
# least K per split in BKs (the 5 in `5 * bk`), last_wave_rate: kLastWaveRate (a partial last
# wave's rate relative to a full one's). Fitted with this script from 64 for every fixed work and
# 8 BKs; configs 12-15 then from a rate of 0.8 and a fixed work of 16, with the least K per split
# held at 5; then the last wave's rate from 0.6.
P0 = dict(
    rate0=1.07, rate1=0.955, rate2=0.85, rate3=0.84, rate11=0.0,
    rate12=1.04, rate13=0.8, rate14=0.8, rate15=0.8,
    rate_bk0=0.91, rate_bk1=0.95, rate_bk2=1.0, rate_bk3=0.91, rate_bk11=1.18,
    rate_bk12=1.12, rate_bk13=0.856, rate_bk14=0.8, rate_bk15=0.68,
    fixed0=11.0, fixed1=64.0, fixed2=64.0, fixed3=17.0, fixed11=64.0,
    fixed12=26.0, fixed13=16.0, fixed14=16.0, fixed15=12.0,
    kUnitsPerByte=0.032, kLaunchUnits=1.28e6, last_wave_rate=0.3, min_split_bk=5,
)  # fmt: skip
FACTORS = (0.25, 0.5, 0.7, 0.85, 0.93, 1.07, 1.15, 1.4, 2.0, 4.0)
# 5: k_split >= 80, i.e. K / splits > 64, the least that measure_f32_plans.py times.
MIN_SPLIT_BKS = (4, 5, 8, 16)
UNMEASURED = "nearest"  # or "penalty" (--unmeasured)


def cdiv(a, b):
    return (a + b - 1) // b


def round_k_split(K, s, bk):
    return ((K + s - 1) // s + bk - 1) // bk * bk


def estimate(P, M, N, K, bm, bn, bk, blocks_per_sm, rate, fixed, sms, max_splits):
    """(cost, splits): estimate() of gemm_heuristic.cpp without its tail split-K part."""
    tiles = cdiv(M, bm) * cdiv(N, bn)
    slots = sms * blocks_per_sm

    def wave(k):
        return bm * bn * (k + fixed) * blocks_per_sm / rate

    best = (math.inf, 1)
    s = 1
    while s <= max_splits:
        k_split = round_k_split(K, s, bk)
        if s > 1 and k_split < P["min_split_bk"] * bk:
            break  # too little K per split
        blocks = tiles * s
        waves = cdiv(blocks, slots)
        # The last wave costs its busiest SM's blocks over their share at last_wave_rate of the
        # SM's full rate (fewer warps hide less latency), at most a full wave.
        last = blocks - (waves - 1) * slots
        busiest = cdiv(last, sms) / blocks_per_sm
        cost = (waves - 1 + min(1.0, busiest / P["last_wave_rate"])) * wave(k_split)
        if s > 1:
            cost += (2 * s + 1) * M * N * 4 * P["kUnitsPerByte"] + P["kLaunchUnits"]
        if cost < best[0]:
            best = (cost, s)
        s *= 2
    return best


def rows_aligned(M, N, K, layout):
    """Whether both operands' rows are 16-byte aligned, as measure_f32_plans.py makes them (fresh
    tensors: the leading dimension decides)."""
    lda = M if layout[0] == "t" else K
    ldb = K if layout[1] == "t" else N
    return lda % 4 == 0 and ldb % 4 == 0


def rate_of(P, c, layout, aligned=True):
    """Config c's rate for the layout: by B's layout, by the rows' alignment where P has the
    unaligned rates, and by A's layout where P has the A-layout rates."""
    bk = "_bk" if layout[1] == "t" else ""
    if not aligned and f"rate_u{bk}{c}" in P:
        return P[f"rate_u{bk}{c}"]
    if layout[0] == "t" and f"rate_at{bk}{c}" in P:
        return P[f"rate_at{bk}{c}"]
    return P[f"rate{bk}{c}"]


def choose_tiles(P, M, N, K, layout):
    """(config, splits): choose_tiles() of gemm_heuristic.cpp without tail split-K."""
    best_config, best = CANDIDATES[0], (math.inf, 1)
    aligned = rows_aligned(M, N, K, layout)
    for c in CANDIDATES:
        rate = rate_of(P, c, layout, aligned)
        if rate <= 0.0:
            continue  # not a candidate for this layout
        bm, bn, bk = TILES[c]
        e = estimate(P, M, N, K, bm, bn, bk, BLOCKS_PER_SM[c], rate, P[f"fixed{c}"], SMS,
                     MAX_SPLITS)  # fmt: skip
        if e[0] < best[0] * 0.999:  # ties go to the earlier candidate
            best, best_config = e, c
    return best_config, best[1]


def load(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            rows += [r for r in json.load(f) if r["plans"]]
    for r in rows:
        r["best_us"] = min(r["plans"].values())
        r["by_config"] = {}
        for key, us in r["plans"].items():
            c, s = map(int, key.split("/"))
            r["by_config"].setdefault(c, {})[s] = us
    return rows


def picked_us(r, config, splits):
    """The measured time of plan (config, splits), and whether it was not measured."""
    measured = r["by_config"].get(config, {})
    if splits in measured:
        return measured[splits], False
    lower = [s for s in measured if s < splits]
    if UNMEASURED == "penalty" or not lower:
        return max(r["plans"].values()), True
    return measured[max(lower)], True


def evaluate(P, rows, min_k=0):
    """Mean and worst log regret, unmeasured picks, ref_us / picked time (geomean, 10th pct)."""
    regrets, ratios, remapped = [], [], 0
    for r in rows:
        if r["K"] <= min_k:
            continue
        us, moved = picked_us(r, *choose_tiles(P, r["M"], r["N"], r["K"], r["layout"]))
        remapped += moved
        regrets.append(math.log(us / r["best_us"]))
        ratios.append(r["ref_us"] / us)
    return dict(
        n=len(regrets),
        loss=statistics.fmean(regrets),
        worst=max(regrets),
        remapped=remapped,
        vs_cublas=statistics.geometric_mean(ratios),
        p10=statistics.quantiles(ratios, n=10, method="inclusive")[0],
    )


def loss(P, rows):
    total = 0.0
    for r in rows:
        us, _ = picked_us(r, *choose_tiles(P, r["M"], r["N"], r["K"], r["layout"]))
        total += math.log(us / r["best_us"])
    return total / len(rows)


def tries(P, k):
    return MIN_SPLIT_BKS if k == "min_split_bk" else [P[k] * f for f in FACTORS]


def fit(P, rows, keys, steps=40):
    """Coordinate search over keys: per step, the best single move of one constant."""
    P = dict(P)
    cur = loss(P, rows)
    for _ in range(steps):
        best = (cur - 1e-6, None, None)
        for k in keys:
            old = P[k]
            for v in tries(P, k):
                P[k] = v
                val = loss(P, rows)
                if val < best[0]:
                    best = (val, k, v)
            P[k] = old
        if best[1] is None:
            break
        cur, P[best[1]] = best[0], best[2]
        print(f"  {best[1]} -> {best[2]:.4g}: loss {cur:.4f}")
    return P


def plateau(P, rows, keys):
    """Per constant, the range (over its value times 0.25 .. 4) where the fitted loss holds."""
    base = loss(P, rows)
    out = {}
    for k in keys:
        old = P[k]
        grid = [old * 2 ** (i / 8) for i in range(-16, 17)]
        values = MIN_SPLIT_BKS if k == "min_split_bk" else grid
        same = []
        for v in values:
            P[k] = v
            if loss(P, rows) <= base + 1e-9:
                same.append(v)
        P[k] = old
        out[k] = (min(same), max(same))
    return out


def mirror_check(rows):
    """Picks of the mirror at P0 against the measured heuristic's where it chose no tail split."""
    agree = total = 0
    for r in rows:
        config, splits, _, tail_splits = r["choice"]
        if tail_splits:
            continue
        total += 1
        agree += choose_tiles(P0, r["M"], r["N"], r["K"], r["layout"]) == (config, splits)
    return agree, total


def counts(rows, P=None):
    """How often each config is the best plan (or P's pick), by B's layout."""
    out = {}
    for r in rows:
        if P is None:
            c = int(min(r["plans"], key=r["plans"].get).split("/")[0])
        else:
            c = choose_tiles(P, r["M"], r["N"], r["K"], r["layout"])[0]
        key = f"{c}/{'Bk' if r['layout'][1] == 't' else 'Bn'}"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def report(name, P, sets):
    for label, rows in sets:
        for min_k in (0, 48):
            e = evaluate(P, rows, min_k)
            print(
                f"{name:8s} {label:7s} K>{min_k:<2d} n={e['n']:3d} loss {e['loss']:.4f} "
                f"worst {e['worst']:.3f} unmeasured {e['remapped']:2d} | vs cuBLAS geomean "
                f"{e['vs_cublas']:.3f} p10 {e['p10']:.3f}"
            )


def auto_report(sets):
    """The heuristic as measured (auto_us: its own pick, tail split-K included)."""
    for label, rows in sets:
        for min_k in (0, 48):
            sel = [r for r in rows if r["K"] > min_k]
            reg = [math.log(r["auto_us"] / r["best_us"]) for r in sel]
            rat = [r["ref_us"] / r["auto_us"] for r in sel]
            p10 = statistics.quantiles(rat, n=10, method="inclusive")[0]
            print(
                f"auto_us  {label:7s} K>{min_k:<2d} n={len(sel):3d} loss "
                f"{statistics.fmean(reg):.4f}                            | vs cuBLAS geomean "
                f"{statistics.geometric_mean(rat):.3f} p10 {p10:.3f}"
            )


def cpp(P):
    def arr(prefix):
        return ", ".join(f"{P[f'{prefix}{c}']:.3g}" for c in CANDIDATES)

    n = len(CANDIDATES)
    lines = [
        f"constexpr std::array<double, {n}> kF32CandidateRate = {{{arr('rate')}}};",
        f"constexpr std::array<double, {n}> kF32CandidateRateBK = {{{arr('rate_bk')}}};",
    ]
    if "rate_at0" in P:
        lines += [
            f"// A M-contiguous, B row-major: {{{arr('rate_at')}}}",
            f"// A M-contiguous, B K-contiguous: {{{arr('rate_at_bk')}}}",
        ]
    lines += [
        f"constexpr std::array<int, {n}> kF32CandidateFixedK = {{{arr('fixed')}}};",
        f"constexpr double kUnitsPerByte = {P['kUnitsPerByte']:.3g};",
        f"constexpr double kLaunchUnits = {P['kLaunchUnits']:.3g};",
        f"constexpr double kLastWaveRate = {P['last_wave_rate']:.3g};",
        f"// too little K per split: if (s > 1 && k_split < {P['min_split_bk']} * bk) break;",
    ]
    return "\n".join(lines)


def main():
    global UNMEASURED
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="+", help="measure_f32_plans.py rows to fit on")
    parser.add_argument("--holdout", nargs="*", default=[], help="rows only reported on")
    parser.add_argument("--unmeasured", choices=("nearest", "penalty"), default=UNMEASURED)
    parser.add_argument(
        "--no-a-layout", action="store_true", help="skip the A-layout and alignment fits"
    )
    args = parser.parse_args()
    UNMEASURED = args.unmeasured
    rows, hold = load(args.json), load(args.holdout)
    sets = [("fit", rows)] + ([("holdout", hold)] if hold else [])
    agree, total = mirror_check(rows + hold)
    print(f"mirror at the C++ constants: {agree} of {total} no-tail picks as measured")
    for label, rs in sets:
        print(f"best plan's config/B layout, {label}: {counts(rs)}")
        print(f"  picked before: {counts(rs, P0)}")
    auto_report(sets)
    report("before", P0, sets)
    keys = [k for k in P0 if P0[k] != 0.0]  # rate 0: not a candidate, stays so
    print("fit:")
    P = fit(P0, rows, keys)
    report("after", P, sets)
    for label, rs in sets:
        print(f"  picked after, {label}: {counts(rs, P)}")
    print(cpp(P))
    changed = [k for k in keys if P[k] != P0[k]]
    for k, (lo, hi) in plateau(P, rows, changed).items():
        print(f"  {k}: fitted loss unchanged from {lo:.4g} to {hi:.4g}")
    if args.no_a_layout:
        return

    # Two features the C++ model lacks, each rate split by A's layout, resp. by whether both
    # operands' rows are aligned (rate_u*: either is not), fitted from the C++ constants as above.
    for label, prefix, when in (
        ("A's layout", "rate_at", "after+A"),
        ("alignment", "rate_u", "after+U"),
    ):
        PX = dict(P0)
        for c in CANDIDATES:
            PX[f"{prefix}{c}"], PX[f"{prefix}_bk{c}"] = P0[f"rate{c}"], P0[f"rate_bk{c}"]
        print(f"fit with rates by {label} too:")
        PX = fit(PX, rows, [k for k in PX if PX[k] != 0.0])
        report(when, PX, sets)
        print(cpp(PX))


if __name__ == "__main__":
    main()
