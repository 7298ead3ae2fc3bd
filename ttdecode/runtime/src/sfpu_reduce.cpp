// sfpu_reduce<MAX, format, REDUCE_ROW> of the compute model (ckernel_sfpu_reduce.h in the ttnn 0.81.1
// wheel): SFPLOAD, SFPSWAP compare-and-swap, SFPSTORE on DST (sfpu.hpp's lane models), so the row max is
// exact in DST's own precision.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "compute_state.hpp"

namespace ttrt {

extern "C" void ttrt_sfpu_reduce(int pool, int format, int dim, uint32_t idst, uint32_t ct_dim, uint32_t rt_dim) {
    const char* api = "sfpu_reduce";
    note(api, "dst %llu, ct_dim %llu, rt_dim %llu", idst, ct_dim, rt_dim);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    check_regs(k, s, REGS_ACQUIRED, api);
    if (pool != 2 /*MAX*/ || dim != 0 /*REDUCE_ROW*/) {
        fail("sfpu_reduce: only PoolType::MAX with ReduceDim::REDUCE_ROW is modelled by the host runtime");
    }
    if (s.sfpu != SF_REDUCE_MAX) {
        fail(std::string(api) + ": the SFPU is configured by " + s.sfpu_init + " (call sfpu_reduce_init first)");
    }
    // The LLK loads DST with the instruction mode of `format`: it must be what DST holds.
    const int dst_format = k.fp32_acc ? 0 /*Float32*/ : 5 /*Float16_b*/;
    if (format != dst_format || s.sfpu_param != format) {
        fail(std::string(api) + ": format " + df_name(format) + " (init: " + df_name(s.sfpu_param) + ") but DST holds " +
             df_name(dst_format) + " (fp32_dest_acc_en=" + (k.fp32_acc ? "true" : "false") + ")");
    }
    if (ct_dim == 0 || rt_dim == 0) fail("sfpu_reduce: ct_dim and rt_dim must be >= 1");
    const float undefined = std::numeric_limits<float>::quiet_NaN();
    for (uint32_t i = 0; i < rt_dim; ++i) {
        float row_max[32];
        for (uint32_t j = 0; j < ct_dim; ++j) {
            const uint32_t t = idst + i * ct_dim + j;
            float* tile = dst_tile(k, s, t, api);
            // Row by row: rows 0-7 of faces 0-1 must hold data; the rows a 16x32 or 8x32 tile's data
            // does not reach give undefined results there, as on the chip, and stay undefined.
            check_faces(s, t, rows_mask(8), api);
            if (s.defined[t] != kAllRows) {
                uint8_t rows_held = 0;  // the 8-row bands held in both column halves
                for (int band = 0; band < 4; ++band) {
                    const uint8_t m = uint8_t((0x5 << ((band / 2) * 4)) << (band % 2));
                    if ((s.defined[t] & m) == m) rows_held |= m;
                }
                s.defined[t] = rows_held;
                s.defined[idst + i * ct_dim] &= rows_held;  // the row maxes of the other rows are undefined too
            }
            for (uint32_t r = 0; r < 32; ++r) {
                // SFPSWAP's max: a total sign-magnitude order (-NaN < -inf < -0 < +0 < +inf < +NaN), so
                // the LLK's tree of swaps gives the same value as this fold.
                float m = sfpu::load(tile[r * 32], k.fp32_acc);
                for (uint32_t c = 1; c < 32; ++c) m = sfpu::swap_max(m, sfpu::load(tile[r * 32 + c], k.fp32_acc));
                row_max[r] = j == 0 ? m : sfpu::swap_max(row_max[r], m);
                for (uint32_t c = 1; c < 32; ++c) tile[r * 32 + c] = undefined;
                tile[r * 32] = sfpu::store(m, k.fp32_acc);  // a tile's own row max stays in its column 0
            }
        }
        float* first = s.dst[idst + i * ct_dim];
        for (uint32_t r = 0; r < 32; ++r) first[r * 32] = sfpu::store(row_max[r], k.fp32_acc);
    }
    k.counters.op_tiles[OP_MAX] += uint64_t(ct_dim) * rt_dim;
    record(k, EV_COMPUTE, OP_MAX, ct_dim * rt_dim);
}

}  // namespace ttrt
