"""SDPAProgramConfig / ComputeKernelConfig: field checks, ttnn round trips, presets."""

from __future__ import annotations

import pytest

from ttdecode.config import (
    PRESETS,
    WORMHOLE_GRID,
    WORMHOLE_MAX_GRID,
    ComputeKernelConfig,
    SDPAProgramConfig,
    get_preset,
)




def test_program_config_defaults_match_ttnn_decode_defaults() -> None:
    # no grid = the device's (tt-metal's factory without a program config); the host runtime's default 8x8
    c = SDPAProgramConfig()
    assert c.compute_with_storage_grid_size is None
    assert (c.sub_core_grids, c.q_chunk_size, c.k_chunk_size) == (None, 0, 0)
    assert c.exp_approx_mode is None and c.max_cores_per_head_batch is None  # not set: 16 or what fits
    assert c.num_cores == 64 and c.cores()[:3] == [(0, 0), (1, 0), (2, 0)]
    host = c.resolve_grid(WORMHOLE_MAX_GRID, WORMHOLE_GRID, "the host limit")
    assert host.compute_with_storage_grid_size == (8, 8)


@pytest.mark.parametrize("k", [32, 64, 128, 256, 512, 1024])
def test_k_chunk_size_accepts_powers_of_two_multiples_of_32(k: int) -> None:
    assert SDPAProgramConfig(k_chunk_size=k).k_chunk_size == k


@pytest.mark.parametrize("k", [16, 48, 96, 100, -32, 1])
def test_k_chunk_size_refuses_non_power_of_two_or_non_tile(k: int) -> None:
    with pytest.raises(ValueError, match=rf"'k_chunk_size': expected 0 \(dynamic\) or a power of two.*got {k}"):
        SDPAProgramConfig(k_chunk_size=k)


def test_k_chunk_size_refuses_bool_and_float() -> None:
    with pytest.raises(TypeError, match="'k_chunk_size': expected an integer, got True"):
        SDPAProgramConfig(k_chunk_size=True)
    with pytest.raises(TypeError, match="'k_chunk_size': expected an integer, got 64.0"):
        SDPAProgramConfig(k_chunk_size=64.0)


def test_chunk_cap_is_none_or_8_16_32_and_only_with_dynamic_chunks() -> None:
    assert SDPAProgramConfig().chunk_cap is None and SDPAProgramConfig(chunk_cap=16).chunk_cap == 16
    with pytest.raises(ValueError, match="'chunk_cap': expected None or one of 8, 16, 32 key tiles, got 12"):
        SDPAProgramConfig(chunk_cap=12)
    with pytest.raises(TypeError, match="'chunk_cap': expected an integer, got True"):
        SDPAProgramConfig(chunk_cap=True)
    with pytest.raises(ValueError, match=r"'chunk_cap': expected None with fixed chunks \(k_chunk_size > 0\), got 16"):
        SDPAProgramConfig(chunk_cap=16, k_chunk_size=256)
    with pytest.raises(ValueError, match="'chunk_cap': expected None"):
        SDPAProgramConfig(chunk_cap=8).to_ttnn()


@pytest.mark.parametrize("m", [0, 65, -1])
def test_max_cores_per_head_batch_must_be_1_to_64(m: int) -> None:
    with pytest.raises(ValueError, match=rf"'max_cores_per_head_batch': expected None \(not set\) or an integer in 1..64, got {m}"):
        SDPAProgramConfig(max_cores_per_head_batch=m)
    assert SDPAProgramConfig(max_cores_per_head_batch=64).max_cores_per_head_batch == 64


@pytest.mark.parametrize("grid", [(0, 8), (8, 0), (-1, 1)])
def test_grid_below_one_core_is_refused(grid: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match=rf"'compute_with_storage_grid_size': expected None \(the device's grid\) "
                                         rf"or \(columns, rows\) of at least 1 x 1, got \({grid[0]}, {grid[1]}\)"):
        SDPAProgramConfig(compute_with_storage_grid_size=grid)


def test_grid_limit_is_checked_when_resolved() -> None:
    """A grid is checked against the limit in force when the call is planned: the device's grid on a
    device, on the host runtime the Wormhole's largest worker grid, 8 columns x 9 rows (a board enables
    at most 72 of the 80 Tensix cores: reference sheet, section 2)."""
    assert (WORMHOLE_GRID, WORMHOLE_MAX_GRID) == ((8, 8), (8, 9))
    c = SDPAProgramConfig(compute_with_storage_grid_size=(8, 9))
    assert c.resolve_grid(WORMHOLE_MAX_GRID, WORMHOLE_GRID, "x") is c and c.num_cores == 72
    for grid in ((9, 8), (8, 10)):
        with pytest.raises(ValueError, match=rf"'program_config.compute_with_storage_grid_size': expected a grid "
                                             rf"within the host limit: at most 8 columns x 9 rows, got \({grid[0]}, {grid[1]}\)"):
            SDPAProgramConfig(compute_with_storage_grid_size=grid).resolve_grid(WORMHOLE_MAX_GRID, WORMHOLE_GRID,
                                                                                "the host limit")


def test_grid_must_be_a_pair() -> None:
    with pytest.raises(TypeError, match="'compute_with_storage_grid_size': expected a pair"):
        SDPAProgramConfig(compute_with_storage_grid_size=(8, 8, 1))  # type: ignore[arg-type]


def test_sub_core_grids_lists_cores_rectangle_by_rectangle() -> None:
    c = SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), sub_core_grids=[((0, 0), (1, 1)), ((4, 7), (7, 7))])
    assert c.sub_core_grids == (((0, 0), (1, 1)), ((4, 7), (7, 7)))
    assert c.cores() == [(0, 0), (1, 0), (0, 1), (1, 1), (4, 7), (5, 7), (6, 7), (7, 7)]
    assert c.num_cores == 8
    hash(c)  # stays hashable


def test_sub_core_grids_need_the_grid_they_lie_in() -> None:
    with pytest.raises(ValueError, match=r"'compute_with_storage_grid_size': expected the grid \(columns, rows\) "
                                         r"the sub_core_grids lie in when sub_core_grids is given, got None"):
        SDPAProgramConfig(sub_core_grids=[((0, 0), (1, 1))])


def test_sub_core_grids_must_lie_inside_the_grid() -> None:
    with pytest.raises(ValueError, match=r"'sub_core_grids\[0\]': expected an inclusive rectangle inside .*got \(\(0, 0\), \(4, 0\)\)"):
        SDPAProgramConfig(compute_with_storage_grid_size=(4, 4), sub_core_grids=[((0, 0), (4, 0))])


def test_sub_core_grids_refuses_reversed_and_overlapping_rectangles() -> None:
    with pytest.raises(ValueError, match=r"'sub_core_grids\[0\]'.*got \(\(3, 0\), \(1, 0\)\)"):
        SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), sub_core_grids=[((3, 0), (1, 0))])
    with pytest.raises(ValueError, match=r"'sub_core_grids\[1\]': expected no core shared with sub_core_grids\[0\]"):
        SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), sub_core_grids=[((0, 0), (3, 3)), ((3, 3), (4, 4))])
    with pytest.raises(ValueError, match=r"'sub_core_grids': expected None or at least one rectangle"):
        SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), sub_core_grids=[])


def test_q_chunk_size_and_exp_approx_mode_are_checked() -> None:
    # ttnn 0.81.1 runs its decode op with q_chunk_size 1, 7, 16, 48 (tests/mock/test_mock_accepts_ttnn_forms.py); unused
    for q in (1, 7, 16, 17, 48):
        assert SDPAProgramConfig(q_chunk_size=q).q_chunk_size == q
    with pytest.raises(ValueError, match=r"'q_chunk_size': expected an integer >= 0 \(unused by decode.*got -1"):
        SDPAProgramConfig(q_chunk_size=-1)
    with pytest.raises(TypeError, match="'exp_approx_mode': expected a bool, got 1"):
        SDPAProgramConfig(exp_approx_mode=1)  # type: ignore[arg-type]


def test_exp_approx_mode_none_follows_the_compute_config() -> None:
    assert SDPAProgramConfig().resolved_exp_approx_mode(ComputeKernelConfig()) is False
    assert SDPAProgramConfig().resolved_exp_approx_mode(ComputeKernelConfig(math_approx_mode=True)) is True
    assert SDPAProgramConfig(exp_approx_mode=False).resolved_exp_approx_mode(
        ComputeKernelConfig(math_approx_mode=True)) is False


def test_compute_config_defaults_favour_accuracy() -> None:
    c = ComputeKernelConfig()
    assert (c.math_fidelity, c.math_approx_mode, c.fp32_dest_acc_en, c.packer_l1_acc) == ("HiFi4", False, True, False)


def test_compute_config_refuses_unknown_fidelity_and_non_bools() -> None:
    with pytest.raises(ValueError, match=r"'math_fidelity': expected one of \['LoFi', 'HiFi2', 'HiFi3', 'HiFi4'\], got 'HiFi5'"):
        ComputeKernelConfig(math_fidelity="HiFi5")
    with pytest.raises(TypeError, match="'fp32_dest_acc_en': expected a bool, got 0"):
        ComputeKernelConfig(fp32_dest_acc_en=0)  # type: ignore[arg-type]


def test_program_config_round_trips_through_ttnn(ttnn) -> None:
    ours = SDPAProgramConfig(compute_with_storage_grid_size=(8, 7), sub_core_grids=[((0, 0), (3, 1)), ((0, 4), (7, 4))],
                             k_chunk_size=128, exp_approx_mode=False, max_cores_per_head_batch=8)
    theirs = ours.to_ttnn()
    assert isinstance(theirs, ttnn.SDPAProgramConfig)
    g = theirs.compute_with_storage_grid_size
    assert (g.x, g.y, theirs.k_chunk_size, theirs.max_cores_per_head_batch) == (8, 7, 128, 8)
    assert theirs.exp_approx_mode is False
    assert SDPAProgramConfig.from_ttnn(theirs) == ours
    assert SDPAProgramConfig.coerce(theirs) == ours


def test_from_ttnn_reads_a_config_made_by_ttnn(ttnn) -> None:
    theirs = ttnn.SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), q_chunk_size=0, k_chunk_size=0,
                                    exp_approx_mode=False)
    # a ttnn config always carries its grid and max_cores_per_head_batch (16 unless given): both count as set
    assert SDPAProgramConfig.from_ttnn(theirs) == SDPAProgramConfig(
        compute_with_storage_grid_size=(8, 8), exp_approx_mode=False, max_cores_per_head_batch=16)


def test_from_ttnn_refuses_options_not_implemented(ttnn) -> None:
    theirs = ttnn.SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), q_chunk_size=0, k_chunk_size=0,
                                    max_k_splits=2)
    with pytest.raises(ValueError, match="'obj.max_k_splits': expected 1.*got 2"):
        SDPAProgramConfig.from_ttnn(theirs)
    with pytest.raises(TypeError, match="'obj': expected a ttnn.SDPAProgramConfig, got 'int'"):
        SDPAProgramConfig.from_ttnn(3)


def test_compute_config_round_trips_through_ttnn(ttnn) -> None:
    ours = ComputeKernelConfig(math_fidelity="HiFi2", math_approx_mode=True, fp32_dest_acc_en=False, packer_l1_acc=True)
    theirs = ours.to_ttnn()
    assert isinstance(theirs, ttnn.WormholeComputeKernelConfig)
    assert theirs.math_fidelity == ttnn.MathFidelity.HiFi2
    assert ComputeKernelConfig.from_ttnn(theirs) == ours
    assert ComputeKernelConfig.coerce(theirs) == ours


def test_ttnn_default_fidelity_invalid_maps_to_hifi4(ttnn) -> None:
    theirs = ttnn.WormholeComputeKernelConfig()  # MathFidelity.Invalid: "op default"
    assert ComputeKernelConfig.from_ttnn(theirs).math_fidelity == "HiFi4"


def test_coerce_refuses_other_objects() -> None:
    with pytest.raises(TypeError, match="'program_config': expected None, ttdecode.config.SDPAProgramConfig.*got 'dict'"):
        SDPAProgramConfig.coerce({})
    with pytest.raises(TypeError, match="'compute_kernel_config': expected None, .*got 'str'"):
        ComputeKernelConfig.coerce("HiFi4")
    assert SDPAProgramConfig.coerce(None) == SDPAProgramConfig()
    assert ComputeKernelConfig.coerce(None) == ComputeKernelConfig()


def test_presets_hold_the_per_chip_llama_shapes() -> None:
    assert (get_preset("llama-3.1-8b-n150").num_heads, get_preset("llama-3.1-8b-n150").num_kv_heads) == (32, 8)
    assert (PRESETS["llama-3.1-8b-t3k"].num_heads, PRESETS["llama-3.1-8b-t3k"].num_kv_heads) == (4, 1)
    assert (PRESETS["llama-3.1-70b-t3k"].num_heads, PRESETS["llama-3.1-70b-t3k"].num_kv_heads) == (8, 1)
    for p in PRESETS.values():
        assert p.num_heads % p.num_kv_heads == 0
        assert (p.head_dim, p.head_dim_v) == ((576, 512) if p.mla else (128, None))
        assert p.program_config().compute_with_storage_grid_size == p.grid
    assert [(p.num_heads, p.num_kv_heads) for n, p in PRESETS.items() if p.mla] == [(16, 1), (128, 1)]
    with pytest.raises(ValueError, match=r"'preset': expected one of \[.*\], got 'gpt-2'"):
        get_preset("gpt-2")
