"""Galaxy grids: a Galaxy's Wormhole chips are not harvested, so their worker grid is the whole 8 x 10
(tt-metal's Galaxy Llama passes ``sub_core_grids`` over rows 0-9, e.g. ``((1, 0), (3, 9))``). The host
runtime's grid limit follows the board it models (``ttdecode.config.host_grid_limit``: TTDECODE_BOARD,
default n150: 8 x 9); FlashDecode's planner and rotary_kv_append accept an 8 x 10 grid and sub-core
rectangles in it on a Galaxy board and refuse beyond it naming the argument; the host runtime runs
kernels on cores of row 9. (The device side: tests/mock/test_galaxy_mock.py.)"""

from __future__ import annotations

import pytest
import torch

import ttdecode
from ttdecode.config import BOARD_ENV, BOARD_GRIDS, SDPAProgramConfig, host_board, host_grid_limit

GALAXY_SUB_CORE_GRIDS = [((1, 0), (3, 9)), ((5, 0), (6, 9))]  # tt-metal's Galaxy Llama decode cores


def test_the_host_grid_limit_follows_the_board(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BOARD_ENV, raising=False)
    assert host_board() == "n150" and host_grid_limit()[0] == (8, 9)
    assert {b: BOARD_GRIDS[b] for b in ("n150", "n300", "t3k", "galaxy")} == {
        "n150": (8, 9), "n300": (8, 9), "t3k": (8, 9), "galaxy": (8, 10)}
    monkeypatch.setenv(BOARD_ENV, "galaxy")
    assert host_board() == "galaxy" and host_grid_limit()[0] == (8, 10)
    assert host_grid_limit("t3k")[0] == (8, 9)  # a board named in the call wins
    monkeypatch.setenv(BOARD_ENV, "galaxi")
    with pytest.raises(ValueError, match=rf"argument '{BOARD_ENV}': expected one of \['galaxy', 'n150', 'n300', "
                                         r"'t3k'\] \(the board the host runtime models\), got 'galaxi'"):
        host_grid_limit()
    with pytest.raises(ValueError, match=r"argument 'board': expected one of .* got 'blackhole'"):
        host_board("blackhole")


def _decode(grid: tuple[int, int], sub_core_grids=None) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(1, 2, 8, 64, generator=g), torch.randn(2, 1, 256, 64, generator=g), \
        torch.randn(2, 1, 256, 64, generator=g)
    pc = SDPAProgramConfig(compute_with_storage_grid_size=grid, sub_core_grids=sub_core_grids)
    return ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos=[200, 77], backend="host", program_config=pc)


def test_flash_decode_runs_on_a_galaxy_chip_s_row_9_on_the_host_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a Galaxy board the host runtime takes the 8 x 10 grid and sub-core rectangles through row 9:
    eight cores of row 9 give the bytes eight cores of row 0 give (the same plan on other cores), and
    tt-metal's Galaxy sub-core grids plan and run."""
    monkeypatch.setenv(BOARD_ENV, "n150")
    row0 = _decode((8, 9), [((0, 0), (7, 0))])
    monkeypatch.setenv(BOARD_ENV, "galaxy")
    row9 = _decode((8, 10), [((0, 9), (7, 9))])
    assert torch.equal(row9, row0)
    galaxy = _decode((8, 10), GALAXY_SUB_CORE_GRIDS)
    whole = _decode((8, 10))
    assert galaxy.shape == whole.shape == (1, 2, 8, 64)
    assert torch.allclose(galaxy.float(), row0.float(), atol=0.02) and torch.allclose(whole.float(), row0.float(),
                                                                                      atol=0.02)


def test_grids_beyond_the_board_are_refused_naming_the_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BOARD_ENV, "n150")
    with pytest.raises(ValueError, match=r"'program_config.compute_with_storage_grid_size': expected a grid within the "
                                         r"largest Wormhole worker grid of a n150 chip, .*at most 8 columns x 9 rows, "
                                         r"got \(8, 10\)"):
        _decode((8, 10), GALAXY_SUB_CORE_GRIDS)
    monkeypatch.setenv(BOARD_ENV, "galaxy")
    for grid in ((8, 11), (9, 10)):
        with pytest.raises(ValueError, match=r"'program_config.compute_with_storage_grid_size': expected a grid "
                                             r"within the largest Wormhole worker grid of a galaxy chip, .*at most 8 "
                                             rf"columns x 10 rows, got \({grid[0]}, {grid[1]}\)"):
            _decode(grid)
    with pytest.raises(ValueError, match=r"'sub_core_grids\[1\]': expected an inclusive rectangle inside "
                                         r"compute_with_storage_grid_size \(8, 10\).*got \(\(5, 0\), \(6, 10\)\)"):
        _decode((8, 10), [((1, 0), (3, 9)), ((5, 0), (6, 10))])


def test_rotary_append_deals_users_to_row_9_on_a_galaxy_board(monkeypatch: pytest.MonkeyPatch) -> None:
    """80 users over the 8 x 10 grid (users 72..79 on row 9) write what 80 users over 8 x 8 write; the
    grid beyond the modelled board is refused naming 'grid'."""
    b, nkv, d, s = 80, 1, 32, 32
    g = torch.Generator().manual_seed(5)
    k, v = torch.randn(1, b, nkv, d, generator=g), torch.randn(1, b, nkv, d, generator=g)
    kc = ttdecode.from_torch(torch.randn(b, nkv, s, d, generator=g), dtype=ttdecode.DataType.bfloat8_b)
    vc = ttdecode.from_torch(torch.randn(b, nkv, s, d, generator=g), dtype=ttdecode.DataType.bfloat8_b)
    ang = torch.arange(b)[:, None] * (1.0 / 10000 ** (torch.arange(0, d, 2) / d))[None]
    kw = dict(cur_pos=[i % s for i in range(b)], cos=torch.cat([ang.cos()] * 2, 1), sin=torch.cat([ang.sin()] * 2, 1),
              backend="host")
    monkeypatch.setenv(BOARD_ENV, "galaxy")
    wide = ttdecode.rotary_kv_append(k, v, kc, vc, grid=(8, 10), **kw)
    monkeypatch.setenv(BOARD_ENV, "n150")
    base = ttdecode.rotary_kv_append(k, v, kc, vc, grid=(8, 8), **kw)
    assert [t.data for t in wide] == [t.data for t in base] and wide[0].data != kc.data
    with pytest.raises(ValueError, match=r"argument 'grid': expected a grid within the largest Wormhole worker grid "
                                         r"of a n150 chip, .*at most 8 columns x 9 rows, got \(8, 10\)"):
        ttdecode.rotary_kv_append(k, v, kc, vc, grid=(8, 10), **kw)
