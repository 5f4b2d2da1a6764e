"""A world of N processes for the distributed tests: started once (torch.multiprocessing, spawn),
each rank in a process group (gloo on the CPU, NCCL on GPU `rank`) on 127.0.0.1, running the
functions the tests send it; every call bounded in time, a broken world closed and restarted.

    world = World(2, "cpu")
    results = world.run(dist_cases.train_ddp, dtype="float64")  # [rank 0's result, rank 1's]
    world.close()

Functions must be importable by name in the workers (module-level functions of a module in
tests/, which the workers find on the sys.path they inherit). Results travel as torch.save bytes.
"""

from __future__ import annotations

import datetime
import importlib
import io
import os
import queue
import socket
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankFailed(AssertionError):
    """A function raised on one or more ranks; the message holds each one's traceback."""


def _dumps(value: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _worker(
    rank: int,
    size: int,
    port: int,
    device: str,
    collective_timeout: float,
    commands: Any,
    results: Any,
    parent_modules: dict[str, str],
) -> None:
    """A rank: joins the group, then runs (fn, kwargs) from `commands` until None."""
    # A worker starts with the parent's sys.path, but imports afresh: if a source tree sits ahead
    # of the installed package on that path, the ranks would test another lltm_ext than the parent.
    for name, parent_file in parent_modules.items():
        try:
            here = importlib.import_module(name).__file__
        except BaseException:
            results.put((rank, False, traceback.format_exc()))
            return
        if here is None or Path(here).resolve() != Path(parent_file).resolve():
            results.put((rank, False, f"{name} is {here} here but {parent_file} in the parent"))
            return
    torch.set_num_threads(1)  # N ranks on a few cores: one thread each
    backend = "gloo"
    device_id = None
    if device == "cuda":
        backend = "nccl"
        device_id = torch.device("cuda", rank)
        torch.cuda.set_device(device_id)
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=size,
        timeout=datetime.timedelta(seconds=collective_timeout),
        device_id=device_id,
    )
    results.put((rank, True, _dumps("ready")))
    try:
        while (item := commands.get()) is not None:
            fn, kwargs = item
            try:
                value = _dumps(fn(**kwargs))
                results.put((rank, True, value))
            except BaseException:
                results.put((rank, False, traceback.format_exc()))
    finally:
        dist.destroy_process_group()


class World:
    """`size` ranks on `device` ("cpu": gloo; "cuda": NCCL, rank r on GPU r)."""

    def __init__(self, size: int, device: str = "cpu", collective_timeout: float = 60) -> None:
        self.size = size
        self.device = device
        ctx = mp.get_context("spawn")
        parent_modules = {
            name: module.__file__
            for name in ("lltm_ext",)
            if (module := sys.modules.get(name)) is not None and module.__file__
        }
        port = free_port()
        self._results = ctx.Queue()
        self._commands = [ctx.Queue() for _ in range(size)]
        self._procs = [
            ctx.Process(
                target=_worker,
                args=(
                    r,
                    size,
                    port,
                    device,
                    collective_timeout,
                    self._commands[r],
                    self._results,
                    parent_modules,
                ),
                daemon=True,
            )
            for r in range(size)
        ]
        env = {"OMP_NUM_THREADS": "1"}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            for p in self._procs:
                p.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self._collect(timeout=120, what="starting the process group")

    @property
    def alive(self) -> bool:
        return all(p.is_alive() for p in self._procs)

    def _collect(self, timeout: float, what: str) -> list[Any]:
        """Every rank's result within `timeout` seconds; on a failure, the others get a few
        seconds (they may be waiting for the failed rank in a collective), then the world is
        closed and RankFailed raised."""
        deadline = time.monotonic() + timeout
        got: dict[int, Any] = {}
        failed: dict[int, str] = {}
        while len(got) + len(failed) < self.size:
            left = deadline - time.monotonic()
            if left <= 0 or not (self.alive or not self._results.empty()):
                break
            try:
                rank, ok, value = self._results.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if ok:
                got[rank] = torch.load(io.BytesIO(value), weights_only=False)
            else:
                failed[rank] = value
                deadline = min(deadline, time.monotonic() + 5)  # the others: a little longer
        if failed or len(got) < self.size:
            silent = sorted(set(range(self.size)) - set(got) - set(failed))
            exits = {r: self._procs[r].exitcode for r in silent}
            self.close(wait=0)  # a rank may be stuck in a collective: end them all now
            parts = [f"rank {r} raised:\n{tb}" for r, tb in sorted(failed.items())]
            for r in silent:
                if exits[r] is not None:
                    parts.append(f"rank {r} exited with code {exits[r]} while {what}")
                elif failed:
                    parts.append(f"rank {r} did not finish {what} (waiting for a failed rank?)")
                else:
                    parts.append(f"rank {r} timed out after {timeout:.0f} s while {what}")
            raise RankFailed("\n".join(parts))
        return [got[r] for r in range(self.size)]

    def run(self, fn: Callable[..., Any], timeout: float = 120, **kwargs: Any) -> list[Any]:
        """fn(**kwargs) on every rank; their results, rank 0's first."""
        if not self.alive:
            raise RuntimeError("the world is closed")
        for q in self._commands:
            q.put((fn, kwargs))
        return self._collect(timeout, f"running {fn.__name__}")

    def close(self, wait: float = 10) -> None:
        """Ask the ranks to leave, then end those that have not within `wait` seconds."""
        for q in self._commands:
            try:
                q.put(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + wait
        for p in self._procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
        for p in self._procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
