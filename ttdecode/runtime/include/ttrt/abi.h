// Entry points of the ttdecode host runtime (the "runner" executable) that the kernel-facing API
// headers call. Kernels never call these directly; they use the Metalium API in api/...
//
// Addresses are device L1 byte addresses of the calling core: the runner maps the running core's
// L1 at the same host virtual addresses, so an L1 address is also a valid host pointer.
#pragma once

#include <cstdint>

extern "C" {
// ---- circular buffers (shared by dataflow and compute kernels) ----
void ttrt_cb_reserve_back(int32_t cb, int32_t num_pages);
void ttrt_cb_push_back(int32_t cb, int32_t num_pages);
void ttrt_cb_wait_front(int32_t cb, int32_t num_pages);
void ttrt_cb_pop_front(int32_t cb, int32_t num_pages);
bool ttrt_cb_pages_reservable_at_back(int32_t cb, int32_t num_pages);
bool ttrt_cb_pages_available_at_front(int32_t cb, int32_t num_pages);
uint32_t ttrt_get_write_ptr(uint32_t cb);
uint32_t ttrt_get_read_ptr(uint32_t cb);
uint32_t ttrt_compute_tile_address(uint32_t cb, uint32_t tile_index);

// ---- NoC ----
void ttrt_noc_read(uint64_t src_noc_addr, uint32_t dst_l1_addr, uint32_t size, const char* api);
void ttrt_noc_write(uint32_t src_l1_addr, uint64_t dst_noc_addr, uint32_t size, const char* api);
void ttrt_noc_read_barrier(void);
void ttrt_noc_write_barrier(void);
void ttrt_noc_writes_flushed(void);
void ttrt_noc_atomic_barrier(void);
void ttrt_noc_full_barrier(void);
void ttrt_sem_inc(uint64_t dst_noc_addr, uint32_t incr);
void ttrt_sem_set(volatile uint32_t* sem, uint32_t value);
void ttrt_sem_wait(volatile uint32_t* sem, uint32_t value, int at_least);

// ---- compute ----
void ttrt_hw_startup(uint32_t icb0, uint32_t icb1, uint32_t ocb);
void ttrt_reconfig_srca(uint32_t cb);
void ttrt_reconfig_srcb(uint32_t cb);
void ttrt_reconfig_pack(uint32_t cb);
void ttrt_pack_geometry(uint32_t cb, const char* api);
// The (old, new) forms: reprogram only when the two CBs' formats differ (as the LLK does).
void ttrt_reconfig_srca_from(uint32_t old_cb, uint32_t cb);
void ttrt_reconfig_srcb_from(uint32_t old_cb, uint32_t cb);
void ttrt_reconfig_pack_from(uint32_t old_cb, uint32_t cb);
void ttrt_tile_regs(int step);  // 0 acquire, 1 commit, 2 wait, 3 release
// FPU op configuration. kind: see ttrt::FpuKind in engine; a/b: op parameters.
void ttrt_fpu_init(int kind, int a, int b, uint32_t icb0, uint32_t icb1, const char* api);
void ttrt_matmul(uint32_t in0, uint32_t in1, uint32_t i0, uint32_t i1, uint32_t idst, uint32_t ct, uint32_t rt,
                 uint32_t kt, const char* api);
void ttrt_binary(int op, int bcast, uint32_t icb0, uint32_t icb1, uint32_t i0, uint32_t i1, uint32_t idst,
                 const char* api);
void ttrt_reduce(int pool, int dim, uint32_t icb, uint32_t icb_scaler, uint32_t itile, uint32_t itile_scaler,
                 uint32_t idst);
void ttrt_reduce_uninit(void);
void ttrt_copy_tile(uint32_t cb, uint32_t itile, uint32_t idst);
// bcast: 1 COL, 2 ROW, 3 SCALAR (BroadcastType values)
void ttrt_unary_bcast(int bcast, uint32_t cb, uint32_t itile, uint32_t idst);
// SFPU reduce (sfpu_reduce): pool/format/dim as PoolType / DataFormat / ReduceDim values
void ttrt_sfpu_reduce(int pool, int format, int dim, uint32_t idst, uint32_t ct_dim, uint32_t rt_dim);
// SFPU: init records the op and programs its constants; ops act on DST tiles. flags (ttrt::sfpu::Flag):
// 1 = the call's is_fp32_dest_acc_en template argument, 2 = DstRoundingMode::NearestEven, 4 = approximation
// mode, 8 = exp's scale_en, 16 = log's fast_and_approx, 32 = exp's InputClamping::ClampToNegative.
// param: exp_tile_init's fp32 `scale`; a unary op's scalar (fp32 bits; exp_tile: the bf16 scale).
void ttrt_sfpu_init(int op, int flags, uint32_t param, const char* api);
void ttrt_sfpu_unary(int op, uint32_t idst, int vector_mode, uint32_t param, int flags, const char* api);
void ttrt_sfpu_binary(int op, uint32_t idst0, uint32_t idst1, uint32_t odst, int vector_mode, int flags,
                      const char* api);
// SFPU op on three DST tiles into a fourth (addcmul: param = the fp32 bits of its scalar).
void ttrt_sfpu_ternary(int op, uint32_t idst0, uint32_t idst1, uint32_t idst2, uint32_t odst, int vector_mode,
                       uint32_t param, int flags, const char* api);
void ttrt_pack_tile(uint32_t idst, uint32_t cb, uint32_t out_index, int out_of_order);
void ttrt_note_call(const char* api);
[[noreturn]] void ttrt_fail(const char* message);
}
