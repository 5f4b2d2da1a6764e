"""Fits the tensor-core GEMM planner's constants to measured plan times (measure_plans.py's JSON).

A Python mirror of src/gemm/gemm_tc_plan.cpp's cost model (keep the two in step: same terms, same
names), and a coordinate search over its constants (each scaled by 0.5 .. 2 in turn, four rounds)
that minimizes the mean over shapes of log(measured time of the plan the model picks / the best
measured time). Prints the loss before and after (mean, worst) and the fitted constants, which go
into gemm_tc_plan.cpp by hand.

    python benchmarks/gemm_tc_plan/fit_plan_model.py plans.json [more.json ...] \\
        [--only mw64,mw128,tw64,tw128,mwstep,mwblock]
"""

import argparse
import json
import math

# The constants as gemm_tc_plan.cpp has them (the starting point of a fit).
P = dict(
    bw=1.37e12, launch=2.8, wbase=3.5, mbase=2.5, copyeff=1.2, busy=0.5,
    w64=270e12, w128=600e12, w256=650e12, wtall=620e12, m64=250e12, m128=380e12, m256=305e12,
    t64=140e12, t128=141e12, t256=139e12, mu16=160e12, mutf=80e12,
    mw64=98e12, mw128=130e12, tw64=43e12, tw128=48e12,
    wstep=0.25, mstep=0.12, mustep=0.45, mwstep=0.46,
    wblock=1.4, mblock=1.0, mublock=1.5, mwblock=0.67, mshare=0.45, wbusy=0.7,
)  # fmt: skip


def cdiv(a, b):
    return (a + b - 1) // b


def wgmma_width(M, N, sms, off_grid=True):
    tm = cdiv(M, 128)

    def r(bn):
        return cdiv(tm * cdiv(N, bn), sms)

    c256, c128, c64, c192 = r(256) * 100, r(128) * 55, r(64) * 30, r(192) * 80
    if c64 < c128 and c64 < c256 and c64 < c192:
        width, cost_ = 64, c64
    elif c192 < c128 and c192 < c256:
        width, cost_ = 192, c192
    else:
        width, cost_ = (128 if c128 < c256 else 256), min(c128, c256)
    if off_grid and r(168) * 74 < cost_:
        width, cost_ = 168, r(168) * 74
    if off_grid and r(144) * 61 < cost_:
        width = 144
    return width


def math_us(P, blocks, steps, res, sms, flops, rate, step, block, by_active=False):
    slots = sms * res
    rounds = cdiv(blocks, slots)
    sharing = slots if not by_active else sms * min(res, cdiv(blocks, sms))
    per = max(flops / (rate / sharing) * 1e6, step)
    return rounds * (steps * per + block)


def mem_us(P, bytes_, blocks, sms, share=None):
    busy = min(1.0, blocks / ((P["busy"] if share is None else share) * sms))
    return bytes_ / (P["bw"] * max(busy, 0.02)) * 1e6


def cost(P, pr, plan, sms=132):
    M, N, K, tf32 = pr["M"], pr["N"], pr["K"], pr["tf32"]
    e = 4.0 if tf32 else 2.0
    ab, bb, cb = e * M * K, e * K * N, e * M * N
    if plan["kernel"] == "wgmma":
        bn, bm = plan["tile"], plan.get("tile_m", 128)
        s = plan.get("splits", 1)
        ks = plan["k_split"] if s > 1 else K
        items = cdiv(M, bm) * cdiv(N, bn) * s
        bk = 32 if tf32 else 64
        if bm == 256:  # the 256-row tile's own rate
            rate = P["wtall"] * (0.5 if tf32 else 1.0)
        elif 128 < bn < 256:  # wgmma_rate: the line through 128's and 256's rates
            rate = (P["w128"] + (P["w256"] - P["w128"]) * (bn - 128) / 128.0) * (
                0.5 if tf32 else 1.0
            )
        else:
            rate = P[{64: "w64", 128: "w128", 256: "w256"}[bn]] * (0.5 if tf32 else 1.0)
        m = math_us(
            P, items, cdiv(ks, bk), 1, sms, 2.0 * bm * bn * bk, rate, P["wstep"], P["wblock"]
        )
        pb = 4.0 * s * M * N if s > 1 else 0.0
        me = mem_us(P, ab + bb + (pb if s > 1 else cb), min(items, sms), sms, P["wbusy"])
        us = P["wbase"] + max(m, me)
        if s > 1:
            us += P["launch"] + (pb + cb) / P["bw"] * 1e6

        def cp(b):
            return P["launch"] + 2 * b / (P["bw"] * P["copyeff"]) * 1e6

        if plan["copy_a"]:
            us += cp(ab)
        if plan["copy_b"]:
            us += cp(bb)
        return us
    tile = plan["tile"]
    bm = 64 if tile == 64 else 128
    bn = tile
    res = {64: 4, 128: 2, 256: 1}[tile]
    tiles = cdiv(M, bm) * cdiv(N, bn)
    s = plan["splits"]
    ks = plan["k_split"] if s > 1 else K
    bk = 16 if tf32 else 32
    if plan["aligned"]:
        rate = P[("t" if tf32 else "m") + str(tile)]
        step = P["mstep"]
        blk = P["mblock"]
    elif plan["words"]:
        rate = P[("tw" if tf32 else "mw") + str(tile)]
        step = P["mwstep"]
        blk = P["mwblock"]
    else:
        rate = P["mutf" if tf32 else "mu16"]
        step = P["mustep"]
        blk = P["mublock"]
    blocks = tiles * s
    m = math_us(
        P, blocks, cdiv(ks, bk), res, sms, 2.0 * bm * bn * bk, rate, step, blk,
        by_active=not plan["aligned"] and plan["words"],
    )  # fmt: skip
    pb = 4.0 * s * M * N if s > 1 else 0.0
    share = P["mshare"] if plan["aligned"] else 1.0  # the 16-byte copies' share of bw
    me = mem_us(P, ab + bb + (pb if s > 1 else cb), min(blocks, sms * res), sms) / share
    us = P["mbase"] + max(m, me)
    if s > 1:
        us += P["launch"] + (pb + cb) / P["bw"] * 1e6
    return us


def aligned_of(r):
    """Whether A / B have 16-byte aligned rows, A / B are K-major, A / B have 4-byte aligned rows
    (the sweep's operands: contiguous, or transposed views of contiguous matrices)."""
    M, N, K, lay = r["M"], r["N"], r["K"], r["layout"]
    per, word = (4, 1) if r["dtype"] == "tf32" else (8, 2)
    lda, outa = (K, M) if lay[0] == "n" else (M, K)
    ldb, outb = (N, K) if lay[1] == "n" else (K, N)
    return (
        (outa <= 1 or lda % per == 0),
        (outb <= 1 or ldb % per == 0),
        lay[0] == "n",
        lay[1] == "t",
        (outa <= 1 or lda % word == 0),
        (outb <= 1 or ldb % word == 0),
    )


def measured_plans(r):
    """(plan dict, measured us) for the calib row."""
    a_al, b_al, a_k, b_k, a_w, b_w = aligned_of(r)
    tf32 = r["dtype"] == "tf32"
    pr = dict(M=r["M"], N=r["N"], K=r["K"], tf32=tf32)
    out = []
    for key, us in r["plans"].items():
        kern, tile, sp, u = key.split("/")
        tile, sp = int(tile), int(sp)
        # Loads "a": the copies the operands allow; "u" (not the 16-byte copies) is the same plan
        # where the operands do not allow those; "r" (registers) is a plan the planner can pick
        # only where the operands allow no copies (it is "a" then).
        if (u == "u" and a_al and b_al) or (u == "r" and ((a_al and b_al) or (a_w and b_w))):
            continue
        if kern == "wgmma":  # splits 0 (files before the wgmma K splits) or 1: one split
            ks = cdiv(cdiv(r["K"], max(sp, 1)), 64) * 64
            s = cdiv(r["K"], ks)
            # 144 / 168 need B K-major at the kernel, its rows whole sectors apart (not recorded
            # in the rows: taken as whole).
            tile = tile or wgmma_width(r["M"], r["N"], 132, b_k or tf32)
            tiles = cdiv(r["M"], 128) * cdiv(r["N"], tile)
            if s > 1 and not (tiles < 132 and tiles * s <= 132):
                continue  # a split the planner never weighs
            plan = dict(
                kernel="wgmma",
                tile=tile,
                copy_a=(not a_al) or (tf32 and not a_k),
                copy_b=(not b_al) or (tf32 and not b_k),
                splits=s,
                k_split=ks if s > 1 else 0,
            )
        else:
            aligned = a_al and b_al
            words = not aligned and a_w and b_w and u != "r"
            ks = cdiv(cdiv(r["K"], sp), 32) * 32
            s = cdiv(r["K"], ks)
            plan = dict(
                kernel="mma", tile=tile, aligned=aligned, words=words, splits=s,
                k_split=ks if s > 1 else 0,
            )  # fmt: skip
        out.append((plan, us))
    # The same plan measured more than once (forced keys that map to one plan): its least time
    # (host stalls only ever add time).
    uniq = {}
    for plan, us in out:
        key = json.dumps(plan, sort_keys=True)
        uniq[key] = (plan, min(us, uniq.get(key, (plan, 1e18))[1]))
    return pr, list(uniq.values())


def loss(P, data):
    tot = 0.0
    worst = 0
    for pr, plans in data:
        best = min(us for _, us in plans)
        pick = min(plans, key=lambda pu: cost(P, pr, pu[0]))
        gap = math.log(pick[1] / best)
        tot += gap
        worst = max(worst, gap)
    return tot / len(data), worst


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="+", help="measure_plans.py's rows")
    parser.add_argument("--only", default="", help="the constants to fit, comma-separated (all)")
    args = parser.parse_args()
    rows = []
    for f in args.json:
        rows += json.load(open(f))
    data = [measured_plans(r) for r in rows if r["plans"]]
    print("start", loss(P, data))
    keys = [k for k in args.only.split(",") if k] or list(P)
    unknown = set(keys) - set(P)
    if unknown:
        raise SystemExit(f"--only: no such constants {sorted(unknown)}; they are {list(P)}")
    for it in range(4):
        for k in keys:
            best = (loss(P, data)[0], P[k])
            for f in (0.5, 0.7, 0.85, 1.15, 1.4, 2.0):
                old = P[k]
                P[k] = old * f
                mean = loss(P, data)[0]
                if mean < best[0] - 1e-6:
                    best = (mean, P[k])
                P[k] = old
            P[k] = best[1]
        print("iter", it, loss(P, data))
    print(json.dumps({k: float(f"{v:.4g}") for k, v in P.items()}))
