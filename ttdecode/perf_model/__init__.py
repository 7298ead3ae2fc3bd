"""A calibrated Wormhole cost model of one FlashDecode step: every cycle term with its source.

The project's only timing model. Besides bandwidth and FPU throughput it charges DRAM latency per
read barrier, the request issue rate, the per-core read plateau, the efficiency of interleaved
tile-by-tile reads, unpack and pack per tile, SFPU cycles counted from the LLK instruction
sequences, a per-tile-call overhead and a cost per configuration call (init / reconfig), CB and semaphore handshakes, the compute kernel's init and the launch skew between cores. All
results are MODEL ESTIMATES, not device measurements. Its users: `perf/sweep_flash_decode.py`,
`perf/bench_llama.py` and the per-chip term of `ttdecode.distributed.cost`.

Both kernels go through the same arithmetic:
- ours: `work_from_counters(plan, counters)` reads the host runtime's events (reads grouped by
  read barrier, compute calls with their tiles, merges between the wait and pop of partial_in);
- tt-metal's: `ttdecode.perf_model.ttmetal_structure.ttmetal_work(...)` writes its structure down as data.

A core is described by `CoreWork`; `evaluate(works, reduction, c)` gives a `Breakdown` (µs). The modules:

- ``constants``: every constant with its source (`CostConstants`, `COST`, `COST_SOURCES`);
- ``evaluator``: per-core work and the reduction as data -> the step estimate (`evaluate`);
- ``op_counts``: our kernels' compute ops in closed form (`chunk_tile_ops`, `chunk_ops`, `merge_ops`);
- ``counters``: our kernels' work read from the runtime's counters, the partials' messages (`writer_messages`)
  matched to the plan's tree (`match_tree`), `work_from_counters`;
- ``pricing``: the prices of a split candidate (a key tile, a chunk, a tree round, a reader, the DRAM floor),
  the narrow interface the FlashDecode planner chooses its split with (`ttdecode.ops.flash_decode.plan.split_choices`):
  the model prices, the planner decides. The model reads plans by their fields and never imports the planner;
- ``ttmetal_structure``: tt-metal's decode op written down as data;
- ``bank_paged``: our kernels on a bank-local paged pool in closed form from a concrete page table (which
  banks a head reaches, which tiles each piece owns, the reader's page-table pass), its banks shared fairly
  by their readers (`evaluator.shared_bank_floors`);
- ``pipeline``: one core's reader and compute kernel timed event by event over its pieces' chunks, in the
  kernels' order (`PiecePipe`, `pipeline_cycles`; bank_paged's works carry it, `CoreWork.pipeline`).

The NoC geometry (hops between cores and from DRAM banks) is ``ttdecode.core.noc_geometry``'s, shared with
the planner.

Per core (cycles of the 1 GHz clock):
- reader: for every read-barrier group, ``latency + max(bytes / plateau, requests x issue)``; a bank
  floor ``bank_load / (peak/12 x efficiency)`` over all cores sharing the banks (the whole step's
  DRAM traffic, efficiency depending on interleaved vs bank-local placement).
- compute: per op, ``tiles x max(unpack, math) + tile calls x call overhead``, pack as its own op, every
  configuration call (init, reconfig) ``init_cycles``; SFPU math per tile from the
  instruction counts x the vector steps the call runs (32 for a full tile, 16 for VectorMode::R).
- the core: ``max(reader, compute) + min(reader, compute) / chunks`` (double-buffered chunks: one
  chunk of the shorter stage is not hidden) + CB handshakes; a work with a pipeline (bank-local paged) is
  timed event by event instead (a softmax block's exps wait for its last K slot, its V slots hold the next
  block's reads back); the same with the merges the core runs added to its compute bounds the step too (a
  core holding many parents in a batched plan).
Step (tt-metal's DEVICE KERNEL DURATION: first core's kernel start to last core's kernel end): the
start spread over the op's cores + max over cores + the reduction: each work's tree timed from the moment every piece
has its local work done, a parent merging its children one at a time in round order, each merge
starting when the parent is free and the child's message (setup, bytes, hops, semaphore) has arrived
(`Reduction.trees`); the slowest work's root ends the step.
"""
