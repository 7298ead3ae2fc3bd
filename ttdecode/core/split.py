"""How a work's keys are split: the chunk and piece arithmetic and the binomial merge tree.

Pure integer functions of a position, a window and the split's sizes, shared by the FlashDecode planner
(`ttdecode.ops.flash_decode.plan`), its program and the perf model (`ttdecode.perf_model`); the
kernels mirror every formula in ``kernels/flash_decode/common.hpp`` (``tests/test_plan.py`` pins the
two together).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ttdecode.core.program_description import WORMHOLE_DRAM_BANKS

TILE = 32
#: Dynamic chunks (k_chunk_size = 0) of up to this many tiles may hold a whole piece; larger ones (up
#: to the plan's chunk_cap) only where a piece takes at least three of them, so that the reads and
#: the compute overlap over most of the piece (dynamic_chunk_tiles). Also the largest split floor.
SMALL_CHUNK_TILES = 8
#: The caps of dynamic chunks the plan picks from (DecodePlan.chunk_cap): those whose chunk-sized
#: buffers fit CHUNK_BUFFER_BUDGET (fitting_chunk_cap), of which the model takes the one that pays
#: (ops.flash_decode.plan.split_choices.chunk_cap).
CHUNK_CAPS = (32, 16, 8)
#: The caps below SMALL_CHUNK_TILES the planner takes itself, largest first, when a plan of dynamic chunks
#: overflows L1 at SMALL_CHUNK_TILES (make_plan; not a caller's chunk_cap): the K/V slots, scores and
#: probabilities shrink with the chunk, and the split floor follows the cap.
SHORT_CHUNK_CAPS = (4, 2, 1)

# ---- chunk arithmetic (mirrored in kernels/flash_decode/common.hpp) --------------------------------------


def _pow2ceil(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def window_first_tile(cur_pos: int, window: int = 0) -> int:
    """First key tile a user attends: 0, or with a sliding window of `window` keys (0 = none) the
    tile holding the oldest attended key max(0, cur_pos - window + 1)."""
    if window <= 0 or cur_pos < 0:
        return 0
    return max(0, cur_pos - window + 1) // TILE


def window_first_key(cur_pos: int, window: int = 0) -> int:
    """Oldest attended key: 0, or max(0, cur_pos - window + 1) with a sliding window."""
    return 0 if window <= 0 else max(0, cur_pos - window + 1)


def span_window(window: int, tokens: int) -> int:
    """The window of the key span T tokens attend together: W + T - 1 (0 = no window). Token j of a
    user whose last token is at cur_pos sits at cur_pos - (T - 1 - j)."""
    return 0 if window <= 0 else window + tokens - 1


def valid_tiles(cur_pos: int, window: int = 0) -> int:
    """Key tiles a user attends: tiles window_first_tile..cur_pos // 32 (ceil((cur_pos + 1) / 32)
    without a window); 0 for a skipped user (cur_pos -1)."""
    return 0 if cur_pos < 0 else (cur_pos + TILE) // TILE - window_first_tile(cur_pos, window)


def dynamic_chunk_tiles(per_piece: int, min_chunk_tiles: int = 1, chunk_cap: int = SMALL_CHUNK_TILES) -> int:
    """A dynamic chunk for pieces of `per_piece` key tiles: c = the power of two >= max(per_piece,
    min_chunk_tiles); up to SMALL_CHUNK_TILES that is the chunk (one chunk holds the piece; at most a
    `chunk_cap` below SMALL_CHUNK_TILES, SHORT_CHUNK_CAPS), above it
    c / 4, at least SMALL_CHUNK_TILES and at most `chunk_cap` (common.hpp dynamic_chunk_tiles): a chunk
    above 8 tiles only where the piece takes at least three. A chunk costs a fixed amount of compute (the
    row max reduction, alpha, the rescales; perf_model.op_counts.chunk_ops), and the first chunk's read (or the
    last one's compute) overlaps nothing: per the model, 16-tile chunks pay from ~3 per piece on."""
    c = _pow2ceil(max(per_piece, min_chunk_tiles))
    if c <= SMALL_CHUNK_TILES:
        return min(c, chunk_cap)
    return min(chunk_cap, max(SMALL_CHUNK_TILES, c // 4))


def chunk_tiles_for(cur_pos: int, fixed_chunk_tiles: int, pieces: int, window: int = 0,
                    min_chunk_tiles: int = 1, chunk_cap: int = SMALL_CHUNK_TILES) -> int:
    """Chunk size in tiles for a user at cur_pos.

    Fixed chunks (k_chunk_size > 0) are the config's. Dynamic chunks (fixed_chunk_tiles == 0)
    spread the user's tiles over the pieces (dynamic_chunk_tiles of ceil(T / p)), so short contexts
    use few small chunks and long ones chunks of `chunk_cap` tiles (DecodePlan.chunk_cap).
    min_chunk_tiles is the plan's split floor (DecodePlan.min_chunk_tiles): below it one more merge
    round would cost more than the halved local work saves, so fewer pieces get keys.
    """
    if fixed_chunk_tiles > 0:
        return fixed_chunk_tiles
    t = valid_tiles(cur_pos, window)
    per_piece = -(-t // pieces) if t else 1
    return dynamic_chunk_tiles(per_piece, min_chunk_tiles, chunk_cap)


@dataclass(frozen=True)
class PieceRange:
    """The key tiles one piece reads: tiles first_tile + k * stride for k in [0, num_tiles) (stride 1:
    a contiguous run; the cyclic split: every stride-th tile)."""

    first_chunk: int
    num_chunks: int
    chunk_tiles: int
    first_tile: int
    num_tiles: int  # the last chunk may be short (the root's ends at cur_pos)
    stride: int = 1

    @property
    def empty(self) -> bool:
        return self.num_chunks == 0

    def tile_at(self, k: int) -> int:
        """The key tile that is the piece's k-th."""
        return self.first_tile + k * self.stride

    @property
    def tiles(self) -> range:
        """Every key tile of the piece, in reading order."""
        return range(self.first_tile, self.first_tile + self.num_tiles * self.stride, self.stride)


def cyclic_pieces(t: int, fixed_chunk_tiles: int, pieces: int, min_chunk_tiles: int,
                  dram_banks: int = WORMHOLE_DRAM_BANKS) -> int:
    """Pieces that get keys in the cyclic split: min(pieces, max(1, T // floor)), floor = the fixed
    chunk or the split floor, rounded down to a multiple of the DRAM banks from that many on (every piece
    then reads one bank; below a piece per bank a short context reads several)."""
    floor = fixed_chunk_tiles if fixed_chunk_tiles > 0 else min_chunk_tiles
    used = min(pieces, max(1, t // floor))
    return used - used % dram_banks if used >= dram_banks else used


def cyclic_piece_range(cur_pos: int, fixed_chunk_tiles: int, pieces: int, index: int, window: int = 0,
                       min_chunk_tiles: int = 1, chunk_cap: int = SMALL_CHUNK_TILES,
                       dram_banks: int = WORMHOLE_DRAM_BANKS) -> PieceRange:
    """The cyclic split (kv_pages "key_row"): of the T attended tiles, piece i of the p' pieces
    that get keys (cyclic_pieces) takes the tiles t with t % p' == i (t counted from the start of
    the sequence, so with p' a multiple of the `dram_banks` banks all its tiles sit in one DRAM bank); chunks are
    runs of consecutive tiles of the piece, dynamic_chunk_tiles(T / p', floor, chunk_cap) tiles or fixed."""
    t = valid_tiles(cur_pos, window)
    used = cyclic_pieces(t, fixed_chunk_tiles, pieces, min_chunk_tiles, dram_banks)
    c = chunk_tiles_for(cur_pos, fixed_chunk_tiles, used, window, min_chunk_tiles, chunk_cap)
    if t == 0 or index >= used:
        return PieceRange(0, 0, c, 0, 0, used)
    start = window_first_tile(cur_pos, window)
    first = start + (index - start) % used
    n = -(-(start + t - first) // used)
    return PieceRange(0, -(-n // c), c, first, n, used)


def piece_range(cur_pos: int, fixed_chunk_tiles: int, pieces: int, index: int, window: int = 0,
                min_chunk_tiles: int = 1, cyclic: bool = False, chunk_cap: int = SMALL_CHUNK_TILES,
                dram_banks: int = WORMHOLE_DRAM_BANKS) -> PieceRange:
    """The chunks of piece `index` (0 = root, owning the last chunk) of a user at cur_pos
    (`cyclic`: cyclic_piece_range).

    Chunks are counted from the first attended tile (window_first_tile), so with a sliding window
    the pieces cover exactly the window's tiles."""
    if cyclic:
        return cyclic_piece_range(cur_pos, fixed_chunk_tiles, pieces, index, window, min_chunk_tiles, chunk_cap,
                                  dram_banks)
    t = valid_tiles(cur_pos, window)
    c = chunk_tiles_for(cur_pos, fixed_chunk_tiles, pieces, window, min_chunk_tiles, chunk_cap)
    n = -(-t // c)
    base, extra = divmod(n, pieces)
    # pieces 0..index-1 hold the chunks above this one
    above = index * base + min(index, extra)
    count = base + (1 if index < extra else 0)
    end_chunk = n - above
    first_chunk = end_chunk - count
    if count == 0:
        return PieceRange(first_chunk=0, num_chunks=0, chunk_tiles=c, first_tile=0, num_tiles=0)
    start = window_first_tile(cur_pos, window)
    first_tile = first_chunk * c
    last_tile = min(end_chunk * c, t)
    return PieceRange(first_chunk, count, c, start + first_tile, last_tile - first_tile)


# ---- the bank-local split (kv_pages "key_row" with a paged cache; mirrored in kernels/flash_decode/common.hpp) ----
#: int32 words of one piece's view in the reader's view page (common.hpp VIEW_WORDS): used, its banks (a bit
#: mask), the readers sharing its bank and which it is, its own tiles, the chunk, the masked tiles' count, their
#: key tiles and their places (4 each), the reader's deferred count, a skipped piece's chunks pushed unread.
VIEW_WORDS = 17


def split_block_tiles(block_size: int) -> int:
    """Key tiles of one block as the bank-local split counts them: block_size / 32, or 1 for 16-position blocks
    (a pair of entries 2t, 2t + 1 makes key tile t, counted as one block: `split_blocks`)."""
    return max(1, block_size // TILE)


def split_blocks(page_table_row: Sequence[int], block_size: int) -> Sequence[int]:
    """The page-table entries the bank-local split counts as blocks of `split_block_tiles` key tiles: the row
    itself, or with 16-position blocks its even entries (key tile t is owned by the bank of its first half,
    entry 2t; its second half, entry 2t + 1, is read from wherever it lies)."""
    return page_table_row[::2] if block_size < TILE else page_table_row


def bank_local_banks(kv_head: int, num_kv_heads: int, block_tiles: int, dram_banks: int) -> tuple[int, ...]:
    """R_h, ascending: the DRAM banks the key tiles of KV head `kv_head` can sit in, whatever the page table.
    Key tile t of a user is page (pt[t // bt] * NKV + h) * bt + t % bt (bt = `block_tiles`, block_size / 32),
    in bank page % `dram_banks`; with g = gcd(NKV * bt, NB) those are (h * bt + r + g * k) % NB, r < bt."""
    g = math.gcd(num_kv_heads * block_tiles, dram_banks)
    return tuple(sorted({(kv_head * block_tiles + r + g * k) % dram_banks
                         for r in range(block_tiles) for k in range(dram_banks // g)}))


def bank_local_reach(num_kv_heads: int, block_tiles: int, dram_banks: int) -> int:
    """|R_h|, the same for every KV head: the most pieces a (user, KV head) takes in the bank-local split
    (one piece per bank at most)."""
    return len(bank_local_banks(0, num_kv_heads, block_tiles, dram_banks))


@dataclass(frozen=True)
class BankLocalView:
    """The key tiles one piece of the bank-local split reads: `tiles` (ascending, the piece's own), in chunks
    of `chunk_tiles`; `used` pieces of the (user, KV head) have keys; `banks` are the piece's DRAM banks."""

    used: int
    banks: tuple[int, ...]
    tiles: tuple[int, ...]
    chunk_tiles: int

    @property
    def num_tiles(self) -> int:
        return len(self.tiles)

    @property
    def num_chunks(self) -> int:
        return -(-len(self.tiles) // self.chunk_tiles)

    @property
    def empty(self) -> bool:
        return not self.tiles

    def tile_at(self, k: int) -> int:
        """The key tile that is the piece's k-th."""
        return self.tiles[k]


def bank_local_view(cur_pos: int, page_table_row: Sequence[int], kv_head: int, index: int, *, pieces: int,
                    num_kv_heads: int, block_tiles: int, dram_banks: int, fixed_chunk_tiles: int = 0,
                    window: int = 0, min_chunk_tiles: int = 1, chunk_cap: int = SMALL_CHUNK_TILES,
                    spread_banks: bool = False) -> BankLocalView:
    """Piece `index` of the bank-local split of (user at cur_pos, `kv_head`), from the user's page-table row:
    L = the banks of R_h holding attended tiles (ascending, nb of them, c_b tiles in bank b); used =
    min(pieces, max(1, T // floor), nb * min c_b) (floor = the fixed chunk or the split floor). With used <= nb
    piece i < used owns the banks L[j] with j % used == i and reads their tiles in ascending order. With
    used > nb (several readers per bank), G = gcd(used, nb) groups: piece i owns the banks L[j] with
    j % G == i % G and reads, as sub-piece i // G of subs = used // G, the o-th of their attended tiles
    (ascending over the group's banks, o from 0) when o % subs == i // G; every piece then holds
    ceil or floor of (its group's tiles) / subs, and every bank has subs readers. Chunks of the fixed size or
    dynamic_chunk_tiles(ceil(T / used), floor, chunk_cap); pieces i >= used are empty. `spread_banks`: one
    group of every bank held (G = 1, whatever used): piece i takes the o-th attended tile when o % used == i,
    so every piece holds ceil or floor of T / used tiles whatever the page table (its reads spread over the
    banks). `window`: the key span's (span_window). 16-position blocks: `page_table_row` is the row's even
    entries and `block_tiles` 1 (split_blocks, split_block_tiles)."""
    t = valid_tiles(cur_pos, window)
    if t == 0:
        return BankLocalView(0, (), (), fixed_chunk_tiles or 1)
    first = window_first_tile(cur_pos, window)
    nkv_bt = num_kv_heads * block_tiles

    def bank(k: int) -> int:
        # in 32-bit unsigned arithmetic, as the kernel: an entry outside the pool (-1) where no key is attended
        # (the first half of a window's first tile, 16-position blocks) still names a bank
        page = (page_table_row[k // block_tiles] % 2 ** 32 * nkv_bt + kv_head * block_tiles + k % block_tiles)
        return page % 2 ** 32 % dram_banks

    attended = range(first, first + t)
    counts: dict[int, int] = {}
    for k in attended:
        counts[bank(k)] = counts.get(bank(k), 0) + 1
    held = sorted(counts)
    nb = len(held)
    floor = fixed_chunk_tiles if fixed_chunk_tiles > 0 else min_chunk_tiles
    used = min(pieces, max(1, t // floor), nb * min(counts.values()))
    chunk = chunk_tiles_for(cur_pos, fixed_chunk_tiles, used, window, min_chunk_tiles, chunk_cap)
    if index >= used:
        return BankLocalView(used, (), (), chunk)
    if used <= nb and not spread_banks:
        own = tuple(b for j, b in enumerate(held) if j % used == index)
        return BankLocalView(used, own, tuple(k for k in attended if bank(k) in own), chunk)
    groups = 1 if spread_banks else math.gcd(used, nb)
    own = tuple(held[index % groups::groups])
    of_group = [k for k in attended if bank(k) in own]
    return BankLocalView(used, own, tuple(of_group[index // groups::used // groups]), chunk)


# ---- the reduction tree -------------------------------------------------------------------


def tree_rounds(pieces: int) -> int:
    return (pieces - 1).bit_length()


def tree_children(index: int, pieces: int) -> list[tuple[int, int]]:
    """(round, child piece) pairs piece `index` receives, in merge order."""
    out = []
    for r in range(tree_rounds(pieces)):
        step = 1 << r
        if index % (2 * step) == 0 and index + step < pieces:
            out.append((r, index + step))
    return out


def tree_parent(index: int) -> tuple[int, int] | None:
    """(round, parent piece) that piece `index` sends to; None for the root."""
    if index == 0:
        return None
    r = (index & -index).bit_length() - 1
    return r, index - (1 << r)
