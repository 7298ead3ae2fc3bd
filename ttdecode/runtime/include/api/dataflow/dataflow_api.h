// Metalium dataflow kernel API (tt-metal 0.81.1 signatures) for the ttdecode host runtime.
// Every call goes to the runner, which moves real bytes between the cores' L1 and the DRAM banks
// and checks the rules the device relies on (see ttdecode/runtime/README.md).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "ttrt/kernel_common.h"

// ---------------------------------------------------------------- circular buffers

FORCE_INLINE void cb_push_back(const int32_t operand, const int32_t num_pages) { ttrt_cb_push_back(operand, num_pages); }
FORCE_INLINE void cb_pop_front(int32_t operand, int32_t num_pages) { ttrt_cb_pop_front(operand, num_pages); }
FORCE_INLINE uint32_t get_write_ptr(uint32_t operand) { return ttrt_get_write_ptr(operand); }
FORCE_INLINE uint32_t get_read_ptr(uint32_t operand) { return ttrt_get_read_ptr(operand); }
FORCE_INLINE bool cb_pages_reservable_at_back(int32_t operand, int32_t num_pages) {
    return ttrt_cb_pages_reservable_at_back(operand, num_pages);
}
FORCE_INLINE void cb_reserve_back(int32_t operand, int32_t num_pages) { ttrt_cb_reserve_back(operand, num_pages); }
FORCE_INLINE bool cb_pages_available_at_front(int32_t operand, int32_t num_pages) {
    return ttrt_cb_pages_available_at_front(operand, num_pages);
}
FORCE_INLINE void cb_wait_front(int32_t operand, int32_t num_pages) { ttrt_cb_wait_front(operand, num_pages); }

// ---------------------------------------------------------------- NoC addresses

FORCE_INLINE
uint64_t get_noc_addr(uint32_t noc_x, uint32_t noc_y, uint32_t addr, uint8_t noc = noc_index) {
    (void)noc;
    return NOC_XY_ADDR(noc_x, noc_y, addr);
}

FORCE_INLINE
std::uint64_t get_noc_addr(std::uint32_t addr, uint8_t noc = noc_index) {
    return NOC_XY_ADDR(my_x[noc], my_y[noc], addr);
}

namespace interleaved_addr_gen {
// Page `id` of an interleaved tensor lives in bank id % 12, at row id / 12 of that bank.
template <bool DRAM>
FORCE_INLINE uint32_t get_bank_offset_index(uint32_t id) {
    static_assert(DRAM, "the ttdecode host runtime models DRAM-interleaved tensors only");
    return id / NUM_DRAM_BANKS;
}
template <bool DRAM>
FORCE_INLINE uint32_t get_bank_index(uint32_t id, uint32_t bank_offset_index) {
    return id - bank_offset_index * NUM_DRAM_BANKS;
}
template <bool DRAM>
FORCE_INLINE uint32_t get_bank_offset(uint32_t bank_index) {
    return ttrt_dram_bank_offset[bank_index];
}
template <bool DRAM>
FORCE_INLINE uint64_t bank_noc_addr(uint32_t bank_index, uint32_t addr) {
    return NOC_XY_ADDR(ttrt_dram_bank_noc_x[bank_index], ttrt_dram_bank_noc_y[bank_index], addr);
}
template <bool DRAM>
FORCE_INLINE constexpr uint32_t get_allocator_alignment() {
    return DRAM ? DRAM_ALIGNMENT : L1_ALIGNMENT;
}
}  // namespace interleaved_addr_gen

constexpr inline uint32_t ttrt_align_up(uint32_t v, uint32_t a) { return (v + a - 1) / a * a; }

// Tile bytes of a data format (what the device's MUL_WITH_TILE_SIZE computes for a 32x32 tile).
template <uint32_t tile_hw = 1024>
FORCE_INLINE constexpr static std::uint32_t MUL_WITH_TILE_SIZE(uint format, uint index) {
    static_assert(tile_hw == 1024, "the ttdecode host runtime models 32x32 tiles only");
    switch (format & 0x1F) {
        case ((uint8_t)DataFormat::Float16):
        case ((uint8_t)DataFormat::Float16_b): return index * 2048;
        case ((uint8_t)DataFormat::Float32): return index * 4096;
        case ((uint8_t)DataFormat::Bfp4):
        case ((uint8_t)DataFormat::Bfp4_b): return index * 576;
        default: return index * 1088;
    }
}

template <bool DRAM>
struct InterleavedAddrGen {
    static constexpr bool is_dram = DRAM;
    uint32_t bank_base_address;  // Base address for the whole tensor.
    const uint32_t page_size;    // Num bytes in page.
    const uint32_t aligned_page_size = ttrt_align_up(page_size, interleaved_addr_gen::get_allocator_alignment<DRAM>());

    FORCE_INLINE
    uint32_t get_addr(
        const uint32_t id, const uint32_t bank_offset_index, const uint32_t bank_index, const uint32_t offset = 0) const {
        (void)id;
        return (bank_offset_index * this->aligned_page_size) + this->bank_base_address + offset +
               interleaved_addr_gen::get_bank_offset<DRAM>(bank_index);
    }

    FORCE_INLINE
    std::uint64_t get_noc_addr(const uint32_t id, const uintptr_t offset = 0, uint8_t noc = noc_index) const {
        (void)noc;
        uint32_t bank_offset_index = interleaved_addr_gen::get_bank_offset_index<DRAM>(id);
        uint32_t bank_index = interleaved_addr_gen::get_bank_index<DRAM>(id, bank_offset_index);
        uint32_t addr = this->get_addr(id, bank_offset_index, bank_index, offset);
        return interleaved_addr_gen::bank_noc_addr<DRAM>(bank_index, addr);
    }
};

template <bool DRAM, uint32_t tile_hw = 1024>
struct InterleavedAddrGenFast {
    static constexpr bool is_dram = DRAM;
    uint32_t bank_base_address;  // Base address for the whole tensor.
    uint32_t page_size;          // Num bytes in bank unit.
    DataFormat data_format;      // Data format

    FORCE_INLINE
    uint32_t get_addr(
        const uint32_t id, const uint32_t bank_offset_index, const uint32_t bank_index, const uint32_t offset = 0) const {
        (void)id;
        return MUL_WITH_TILE_SIZE<tile_hw>((uint)this->data_format, bank_offset_index) + this->bank_base_address +
               offset + interleaved_addr_gen::get_bank_offset<DRAM>(bank_index);
    }

    FORCE_INLINE
    std::uint64_t get_noc_addr(const uint32_t id, const uint32_t offset = 0, uint8_t noc = noc_index) const {
        (void)noc;
        uint32_t bank_offset_index = interleaved_addr_gen::get_bank_offset_index<DRAM>(id);
        uint32_t bank_index = interleaved_addr_gen::get_bank_index<DRAM>(id, bank_offset_index);
        uint32_t addr = this->get_addr(id, bank_offset_index, bank_index, offset);
        return interleaved_addr_gen::bank_noc_addr<DRAM>(bank_index, addr);
    }
};

// The generic form takes address generators whose get_noc_addr() needs no argument (as in 0.81.1,
// where the unused `resolver` parameter selects this overload); the interleaved generators have
// their own (deprecated upstream) overloads below.
template <typename AddrGen>
FORCE_INLINE uint64_t get_noc_addr(
    const uint32_t id,
    const AddrGen& addrgen,
    uint32_t offset = 0,
    uint8_t noc = noc_index,
    decltype(addrgen.get_noc_addr())* resolver = nullptr) {
    (void)resolver;
    return addrgen.get_noc_addr(id, offset, noc);
}

template <bool DRAM>
FORCE_INLINE uint64_t
get_noc_addr(const uint32_t id, const InterleavedAddrGen<DRAM>& addrgen, uint32_t offset = 0, uint8_t noc = noc_index) {
    return addrgen.get_noc_addr(id, offset, noc);
}

template <bool DRAM, uint32_t tile_hw>
FORCE_INLINE uint64_t get_noc_addr(
    const uint32_t id,
    const InterleavedAddrGenFast<DRAM, tile_hw>& addrgen,
    uint32_t offset = 0,
    uint8_t noc = noc_index) {
    return addrgen.get_noc_addr(id, offset, noc);
}

// ---------------------------------------------------------------- NoC transfers

template <bool enable_noc_tracing = true>
FORCE_INLINE void noc_async_read_one_packet(
    uint64_t src_noc_addr,
    uint32_t dst_local_l1_addr,
    uint32_t size,
    uint8_t noc = noc_index,
    uint32_t read_req_vc = NOC_UNICAST_WRITE_VC) {
    (void)noc;
    (void)read_req_vc;
    if (size > NOC_MAX_BURST_SIZE) {
        ttrt_fail("noc_async_read_one_packet: size exceeds NOC_MAX_BURST_SIZE (8192 B)");
    }
    ttrt_noc_read(src_noc_addr, dst_local_l1_addr, size, "noc_async_read_one_packet");
}

template <uint32_t max_page_size = NOC_MAX_BURST_SIZE + 1, bool enable_noc_tracing = true>
inline void noc_async_read(
    uint64_t src_noc_addr,
    uint32_t dst_local_l1_addr,
    uint32_t size,
    uint8_t noc = noc_index,
    uint32_t read_req_vc = NOC_UNICAST_WRITE_VC) {
    (void)noc;
    (void)read_req_vc;
    ttrt_noc_read(src_noc_addr, dst_local_l1_addr, size, "noc_async_read");
}

template <bool enable_noc_tracing = true, bool posted = false>
FORCE_INLINE void noc_async_write_one_packet(
    std::uint32_t src_local_l1_addr,
    std::uint64_t dst_noc_addr,
    std::uint32_t size,
    uint8_t noc = noc_index,
    uint32_t vc = NOC_UNICAST_WRITE_VC) {
    (void)noc;
    (void)vc;
    if (size > NOC_MAX_BURST_SIZE) {
        ttrt_fail("noc_async_write_one_packet: size exceeds NOC_MAX_BURST_SIZE (8192 B)");
    }
    ttrt_noc_write(src_local_l1_addr, dst_noc_addr, size, "noc_async_write_one_packet");
}

template <uint32_t max_page_size = NOC_MAX_BURST_SIZE + 1, bool enable_noc_tracing = true, bool posted = false>
inline void noc_async_write(
    uint32_t src_local_l1_addr,
    uint64_t dst_noc_addr,
    uint32_t size,
    uint8_t noc = noc_index,
    uint32_t vc = NOC_UNICAST_WRITE_VC) {
    static_assert(!posted, "posted writes are not modelled by the ttdecode host runtime");
    (void)noc;
    (void)vc;
    ttrt_noc_write(src_local_l1_addr, dst_noc_addr, size, "noc_async_write");
}

template <typename AddrGen, bool enable_noc_tracing = true>
FORCE_INLINE void noc_async_read_page(
    const uint32_t id, const AddrGen& addrgen, uint32_t dst_local_l1_addr, uint32_t offset = 0, uint8_t noc = noc_index) {
    ttrt_noc_read(addrgen.get_noc_addr(id, offset, noc), dst_local_l1_addr, addrgen.page_size,
                  "noc_async_read_page");
}

template <bool DRAM>
FORCE_INLINE void noc_async_read_tile(
    const uint32_t id,
    const InterleavedAddrGen<DRAM>& addrgen,
    uint32_t dst_local_l1_addr,
    uint32_t offset = 0,
    uint8_t noc = noc_index) {
    ttrt_noc_read(addrgen.get_noc_addr(id, offset, noc), dst_local_l1_addr, addrgen.page_size, "noc_async_read_tile");
}

template <bool DRAM, uint32_t tile_hw>
FORCE_INLINE void noc_async_read_tile(
    const uint32_t id,
    const InterleavedAddrGenFast<DRAM, tile_hw>& addrgen,
    uint32_t dst_local_l1_addr,
    uint32_t offset = 0,
    uint8_t noc = noc_index) {
    ttrt_noc_read(addrgen.get_noc_addr(id, offset, noc), dst_local_l1_addr, addrgen.page_size, "noc_async_read_tile");
}

template <typename AddrGen, bool enable_noc_tracing = true, bool posted = false>
FORCE_INLINE void noc_async_write_page(
    const uint32_t id,
    const AddrGen& addrgen,
    uint32_t src_local_l1_addr,
    uint32_t size = 0,
    uint32_t offset = 0,
    uint8_t noc = noc_index) {
    // size 0 writes the whole page
    ttrt_noc_write(src_local_l1_addr, addrgen.get_noc_addr(id, offset, noc), size ? size : addrgen.page_size,
                   "noc_async_write_page");
}

template <bool DRAM>
FORCE_INLINE void noc_async_write_tile(
    const uint32_t id, const InterleavedAddrGen<DRAM>& addrgen, uint32_t src_local_l1_addr, uint8_t noc = noc_index) {
    ttrt_noc_write(src_local_l1_addr, addrgen.get_noc_addr(id, 0, noc), addrgen.page_size, "noc_async_write_tile");
}

template <bool DRAM, uint32_t tile_hw>
FORCE_INLINE void noc_async_write_tile(
    const uint32_t id,
    const InterleavedAddrGenFast<DRAM, tile_hw>& addrgen,
    uint32_t src_local_l1_addr,
    uint8_t noc = noc_index) {
    ttrt_noc_write(src_local_l1_addr, addrgen.get_noc_addr(id, 0, noc), addrgen.page_size, "noc_async_write_tile");
}

// ---------------------------------------------------------------- barriers

inline void noc_async_read_barrier(uint8_t noc = noc_index) {
    (void)noc;
    ttrt_noc_read_barrier();
}
FORCE_INLINE void noc_async_write_barrier(uint8_t noc = noc_index) {
    (void)noc;
    ttrt_noc_write_barrier();
}
FORCE_INLINE void noc_async_writes_flushed(uint8_t noc = noc_index) {
    (void)noc;
    ttrt_noc_writes_flushed();
}
FORCE_INLINE void noc_async_atomic_barrier(uint8_t noc_idx = noc_index) {
    (void)noc_idx;
    ttrt_noc_atomic_barrier();
}
FORCE_INLINE void noc_async_full_barrier(uint8_t noc_idx = noc_index) {
    (void)noc_idx;
    ttrt_noc_full_barrier();
}

// ---------------------------------------------------------------- semaphores

template <ProgrammableCoreType type = ProgrammableCoreType::TENSIX>
FORCE_INLINE uintptr_t get_semaphore(uint32_t semaphore_id) {
    return (uintptr_t)sem_l1_base[static_cast<int>(type)] + semaphore_id * L1_ALIGNMENT;
}

FORCE_INLINE void noc_semaphore_wait(volatile tt_l1_ptr uint32_t* sem_addr, uint32_t val) { ttrt_sem_wait(sem_addr, val, 0); }
FORCE_INLINE void noc_semaphore_wait_min(volatile tt_l1_ptr uint32_t* sem_addr, uint32_t val) {
    ttrt_sem_wait(sem_addr, val, 1);
}
FORCE_INLINE void noc_semaphore_set(volatile tt_l1_ptr uint32_t* sem_addr, uint32_t val) { ttrt_sem_set(sem_addr, val); }

template <bool posted = false>
FORCE_INLINE void noc_semaphore_inc(uint64_t addr, uint32_t incr, uint8_t noc_id = noc_index, uint8_t vc = NOC_UNICAST_WRITE_VC) {
    static_assert(!posted, "posted atomics are not modelled by the ttdecode host runtime");
    (void)noc_id;
    (void)vc;
    ttrt_sem_inc(addr, incr);
}
