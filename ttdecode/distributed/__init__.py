"""A process group of long-lived workers on ``torch.distributed`` (gloo): one worker per device.

The host backends of the multi-device models (tensor-parallel Llama, context-parallel decode) run
each device as a worker process. This package starts the workers once, keeps them alive across
calls, runs a picklable function on every rank with per-rank arguments and brings the results back.
Collectives between workers are plain ``torch.distributed`` collectives on the gloo group that
every worker joins at start (``dist.all_reduce``, ``dist.all_gather``, ``dist.all_to_all`` ...);
there is no transport of our own. The parent process is only the coordinator: it is not a rank.

API::

    from ttdecode.distributed import WorkerPool, WorkerError, RankContext

    def shard_sum(ctx: RankContext, x: torch.Tensor) -> torch.Tensor:   # module level: picklable
        ctx.state["last"] = x                      # per-worker state, kept across calls
        dist.all_reduce(x)                         # default group = the pool's gloo group
        return x

    with WorkerPool(4, label="device", timeout=120.0) as pool:        # starts 4 workers once
        outs = pool.run(shard_sum, [(torch.ones(2) * r,) for r in range(4)])  # one tuple per rank
        same = pool.run_all(shard_sum, torch.ones(2))                          # same args for all

* ``WorkerPool(world_size, *, label="rank", timeout=300.0, start_timeout=120.0, threads=1)``:
  spawns ``world_size`` processes (``forkserver`` start method, torch preloaded once) that each
  call ``dist.init_process_group("gloo", rank=r, world_size=N)`` on a private file store, with the
  collective timeout ``timeout`` (seconds). ``threads`` sets ``torch.set_num_threads`` in each
  worker (the machine's cores are shared by all ranks).
* ``run(fn, per_rank_args, timeout=None) -> list`` : calls ``fn(ctx, *per_rank_args[r])`` on
  every rank r at once and returns the N results in rank order. ``fn`` and the arguments are
  pickled (module-level functions only; tensors travel through shared memory).
* ``run_all(fn, *args)``: the same arguments on every rank.
* ``RankContext``: ``rank``, ``world_size``, ``label`` and ``state`` (a dict private to the worker,
  kept across calls: put model shards, caches there).
* ``close()`` (or leaving the ``with`` block): asks every worker to leave the group and exit,
  then terminates any that did not within a few seconds. Idempotent; also run at interpreter exit.

Errors: an exception inside ``fn`` is re-raised in the parent as ``WorkerError`` naming the
worker (``"device 3: ValueError: ..."`` with the remote traceback) once every rank answered; the
pool stays usable. If some ranks do not answer within 5 s of another rank's error (they wait in a
collective the failed rank never reaches), the pool is shut down and the error raised.
A worker that dies (killed, crashed, exited) or does not answer within ``timeout`` seconds raises
``WorkerError`` naming it, and the pool is shut down (the other ranks may be blocked in a
collective with the dead one); any later ``run`` raises ``WorkerError`` saying the pool is closed.
"""

from __future__ import annotations

import multiprocessing.connection as mpc
import os
import shutil
import tempfile
import time
import traceback
import weakref
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Optional, Sequence

__all__ = ["WorkerPool", "WorkerError", "RankContext"]

_POLL_SECONDS = 0.05
#: After one rank failed, how long the others get to answer before the pool is shut down.
_ERROR_GRACE_SECONDS = 5.0


class WorkerError(RuntimeError):
    """A worker failed, died or timed out. ``rank`` is the worker's rank (None: the pool itself)."""

    def __init__(self, message: str, rank: Optional[int] = None, remote_traceback: str = "") -> None:
        super().__init__(message + (f"\n--- traceback in the worker ---\n{remote_traceback}" if remote_traceback else ""))
        self.rank = rank
        self.remote_traceback = remote_traceback


@dataclass
class RankContext:
    """What a function run on a worker sees: its rank, the group size, and its private state."""

    rank: int
    world_size: int
    label: str = "rank"
    state: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        """``"<label> <rank>"``, e.g. ``"device 3"``."""
        return f"{self.label} {self.rank}"


def _worker_main(rank: int, world_size: int, label: str, store_path: str, timeout: float, threads: int,
                 conn: mpc.Connection) -> None:
    """Body of a worker process: join the gloo group, then serve (fn, args) requests until None."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    try:
        store = dist.FileStore(store_path, world_size)
        saved = os.dup(1)  # gloo prints a "connected to N peer ranks" line per rank on stdout: drop it
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        try:
            dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                    timeout=timedelta(seconds=timeout))
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(e).__name__}: {e}", traceback.format_exc()))
        return
    conn.send(("ready", None, ""))
    ctx = RankContext(rank=rank, world_size=world_size, label=label)
    try:
        while True:
            try:
                request = conn.recv()
            except EOFError:
                break
            if request is None:
                break
            fn, args = request
            try:
                conn.send(("ok", fn(ctx, *args), ""))
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                conn.send(("error", f"{type(e).__name__}: {e}", traceback.format_exc()))
    finally:
        ctx.state.clear()
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


def _context() -> Any:
    """The multiprocessing context: forkserver with torch preloaded (fast, fork-safe starts)."""
    import torch.multiprocessing as tmp  # registers the tensor reductions (shared-memory tensors)

    ctx = tmp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed"])
    return ctx


class WorkerPool:
    """``world_size`` worker processes in a gloo process group; see the module doc."""

    def __init__(self, world_size: int, *, label: str = "rank", timeout: float = 300.0,
                 start_timeout: float = 120.0, threads: int = 1) -> None:
        if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
            raise ValueError(f"world_size: expected an int >= 1, got {world_size!r}")
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout: expected seconds > 0, got {timeout!r}")
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads: expected an int >= 1, got {threads!r}")
        self.world_size = world_size
        self.label = label
        self.timeout = float(timeout)
        self._closed = False
        self._tmpdir = tempfile.mkdtemp(prefix="ttdecode-pg-")
        ctx = _context()
        self._conns: list[mpc.Connection] = []
        self._procs: list[Any] = []
        for rank in range(world_size):
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(
                target=_worker_main, name=f"ttdecode-{label}-{rank}",
                args=(rank, world_size, label, os.path.join(self._tmpdir, "store"), self.timeout, threads, child),
                daemon=True,
            )
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        # runs on close(), on garbage collection and at interpreter exit (weakref.finalize's atexit)
        self._finalizer = weakref.finalize(self, _shutdown, self._procs, self._conns, self._tmpdir)
        self._collect(start_timeout, starting=True)

    def _name(self, rank: int) -> str:
        return f"{self.label} {rank}"

    # ---- running ----------------------------------------------------------------------------

    def run(self, fn: Callable[..., Any], per_rank_args: Sequence[Sequence[Any]],
            timeout: Optional[float] = None) -> list[Any]:
        """``fn(ctx, *per_rank_args[r])`` on every rank; the results in rank order."""
        if self._closed:
            raise WorkerError(f"the {self.label} pool is closed (a worker failed earlier or close() was called)")
        if not callable(fn):
            raise TypeError(f"fn: expected a picklable function, got {type(fn).__name__}")
        if len(per_rank_args) != self.world_size:
            raise ValueError(f"per_rank_args: expected {self.world_size} argument tuples (one per {self.label}), "
                             f"got {len(per_rank_args)}")
        for rank, (conn, args) in enumerate(zip(self._conns, per_rank_args)):
            try:
                conn.send((fn, tuple(args)))
            except (BrokenPipeError, OSError) as e:
                self.close()
                raise WorkerError(f"{self._name(rank)}: the worker is gone ({e})", rank) from None
            except Exception as e:
                self.close()  # the other ranks may already run fn and wait in a collective
                raise WorkerError(f"{self._name(rank)}: could not send the call ({type(e).__name__}: {e}); "
                                  f"fn and its arguments must be picklable", rank) from None
        return self._collect(self.timeout if timeout is None else float(timeout))

    def run_all(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """``fn(ctx, *args)`` on every rank (the same arguments); the results in rank order."""
        return self.run(fn, [args] * self.world_size)

    def _collect(self, timeout: float, starting: bool = False) -> list[Any]:
        """One answer from every rank; dead or silent workers raise WorkerError naming them."""
        results: list[Any] = [None] * self.world_size
        errors: list[tuple[int, str, str]] = []
        pending = set(range(self.world_size))
        gone: set[int] = set()
        deadline = time.monotonic() + timeout
        while pending:
            ready = mpc.wait([self._conns[r] for r in pending - gone], timeout=_POLL_SECONDS)
            for conn in ready:
                rank = self._conns.index(conn)
                try:
                    status, value, tb = conn.recv()
                except (EOFError, OSError):
                    gone.add(rank)  # the process exited or is exiting; reported below as dead
                    continue
                pending.discard(rank)
                if status == "error":
                    errors.append((rank, value, tb))
                else:
                    results[rank] = value
            for rank in sorted(pending):
                proc = self._procs[rank]
                if rank in gone or (not proc.is_alive() and not self._conns[rank].poll()):
                    proc.join(1.0)
                    code = proc.exitcode
                    self.close()
                    what = "while joining the process group" if starting else "during the call"
                    raise WorkerError(f"{self._name(rank)}: the worker process died {what} (exit code {code})",
                                      rank)
            if errors and pending:
                # The failed rank will not reach the collectives the others may wait in.
                deadline = min(deadline, time.monotonic() + _ERROR_GRACE_SECONDS)
            if pending and time.monotonic() > deadline:
                first = min(pending)
                self.close()
                if errors:
                    rank, msg, tb = errors[0]
                    raise WorkerError(f"{self._name(rank)}: {msg} (the other workers were left waiting, "
                                      f"e.g. in a collective; pool shut down)", rank, tb)
                raise WorkerError(f"{self._name(first)}: no answer within {timeout:g} s "
                                  f"({len(pending)} of {self.world_size} workers silent); pool shut down", first)
        if errors:
            rank, msg, tb = errors[0]
            if starting:
                self.close()
            raise WorkerError(f"{self._name(rank)}: {msg}", rank, tb)
        return results

    # ---- lifetime ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Ask every worker to exit, terminate stragglers, remove the store. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _shutdown(procs: list[Any], conns: list[mpc.Connection], tmpdir: str) -> None:
    for conn in conns:
        try:
            conn.send(None)
        except Exception:  # noqa: BLE001 - already gone
            pass
    deadline = time.monotonic() + 5.0
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
            proc.join(2.0)
        if proc.is_alive():
            proc.kill()
            proc.join(1.0)
    for conn in conns:
        conn.close()
    shutil.rmtree(tmpdir, ignore_errors=True)
