// Circular buffers of the ttdecode host runtime: shared page counters, per-kernel pointers, and the
// checks the device relies on. Every failure names the core, the kernel and the call (engine.cpp: fail).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "compute.hpp"
#include "engine.hpp"

namespace ttrt {

static std::string str(uint64_t v) { return std::to_string(v); }

// ------------------------------------------------------------------ circular buffers

static CbConfig& cb_cfg(Kernel& k, int32_t cb, const char* api) {
    if (cb < 0 || cb >= kNumCbs) fail(std::string(api) + ": CB index " + std::to_string(cb) + " outside 0..31");
    CbConfig& cfg = k.core->cbcfg[cb];
    if (!cfg.present) fail(std::string(api) + ": CB " + std::to_string(cb) + " is not configured on " + core_name(k.core));
    return cfg;
}

uint32_t cb_limit(const CbConfig& c) { return c.addr + c.page_size * c.num_pages; }

// A CB pointer advances by whole pages and must land exactly on the end to wrap (device rule).
static uint32_t advance(const CbConfig& c, uint32_t ptr, int32_t pages) {
    ptr += uint32_t(pages) * c.page_size;
    if (ptr == cb_limit(c)) ptr = c.addr;
    return ptr;
}

static void check_contiguous(const CbConfig& c, uint32_t ptr, int32_t n, int32_t cb, const char* api, const char* side) {
    if (uint64_t(ptr) + uint64_t(n) * c.page_size > cb_limit(c)) {
        const uint32_t at = (ptr - c.addr) / c.page_size;
        fail(std::string(api) + ": " + std::to_string(n) + " pages from " + side + " page " + std::to_string(at) +
             " of CB " + std::to_string(cb) + " run past its end (" + std::to_string(c.num_pages) +
             " pages); the pages of one call must be contiguous, so the CB size must be a multiple of the amounts "
             "reserved/waited along a cycle");
    }
}

bool overlaps(uint32_t a, uint32_t an, uint32_t b, uint32_t bn) { return a < b + bn && b < a + an; }

int cb_unreleased_overlap(const Core& c, uint32_t addr, uint32_t size, const Kernel* holder, uint32_t* first,
                          uint32_t* last) {
    for (int cb = 0; cb < kNumCbs; ++cb) {
        const CbConfig& cfg = c.cbcfg[cb];
        if (!cfg.present || !overlaps(addr, size, cfg.addr, cfg.page_size * cfg.num_pages)) continue;
        const CbCounters& n = c.cbc[cb];
        const uint32_t used = uint32_t(n.received - n.acked);  // pages pushed and not yet popped
        if (used == 0) continue;
        // Pages the writing kernel itself holds (waited for, not popped) are its own to modify.
        uint32_t held_from = 0, held = 0;
        if (holder && holder->core == &c) {
            held_from = (holder->cb[cb].rd - cfg.addr) / cfg.page_size;
            held = holder->cb[cb].waited;
        }
        const uint32_t front = (n.front - cfg.addr) / cfg.page_size;
        for (uint32_t i = 0; i < used; ++i) {
            const uint32_t page = (front + i) % cfg.num_pages;
            if (held && (page + cfg.num_pages - held_from) % cfg.num_pages < held) continue;
            if (!overlaps(addr, size, cfg.addr + page * cfg.page_size, cfg.page_size)) continue;
            uint32_t end = page;
            while (i + 1 < used && overlaps(addr, size, cfg.addr + ((front + i + 1) % cfg.num_pages) * cfg.page_size,
                                            cfg.page_size)) {
                ++i;
                end = (front + i) % cfg.num_pages;
            }
            *first = page;
            *last = end;
            return cb;
        }
    }
    return -1;
}

extern "C" void ttrt_cb_reserve_back(int32_t cb, int32_t n) {
    note("cb_reserve_back", "cb=%lld, %lld pages", cb, n);
    Kernel& k = cur();
    CbConfig& c = cb_cfg(k, cb, "cb_reserve_back");
    if (n < 0 || uint32_t(n) > c.num_pages) {
        fail("cb_reserve_back: " + std::to_string(n) + " pages requested but CB " + std::to_string(cb) + " holds " +
             std::to_string(c.num_pages) + " (this would wait forever on the device)");
    }
    CbView& v = k.cb[cb];
    check_contiguous(c, v.wr, n, cb, "cb_reserve_back", "write");
    ++k.counters.cb_calls;
    record(k, EV_CB_RESERVE, uint16_t(cb), uint32_t(n));
    Wait w;
    w.kind = WaitKind::CbBack;
    w.cb = cb;
    w.n = uint32_t(n);
    block_until(w);
    v.reserved = std::max(v.reserved, uint32_t(n));
}

extern "C" void ttrt_cb_push_back(int32_t cb, int32_t n) {
    note("cb_push_back", "cb=%lld, %lld pages", cb, n);
    Kernel& k = cur();
    CbConfig& c = cb_cfg(k, cb, "cb_push_back");
    CbView& v = k.cb[cb];
    if (n < 0 || uint32_t(n) > v.reserved) {
        fail("cb_push_back: pushes " + std::to_string(n) + " pages of CB " + std::to_string(cb) + " but only " +
             std::to_string(v.reserved) + " are reserved (missing or too small cb_reserve_back)");
    }
    const uint32_t bytes = uint32_t(n) * c.page_size;
    for (Kernel* o : k.core->k) {
        if (!o) continue;
        for (const PendingRead& r : o->reads) {
            if (overlaps(r.dst, r.size, v.wr, bytes)) {
                fail("cb_push_back: pushes pages of CB " + std::to_string(cb) + " while a noc_async_read into " +
                     hex(r.dst) + " (" + str(r.size) + " B) by the " + kind_name(o->kind) +
                     " kernel is outstanding (missing noc_async_read_barrier before the push)");
            }
        }
    }
    CbCounters& cc = k.core->cbc[cb];
    cc.received += uint32_t(n);
    ++cc.pushes;
    v.wr = advance(c, v.wr, n);
    v.reserved -= uint32_t(n);
    v.pack_next = 0;
    ++k.counters.cb_calls;
    record(k, EV_CB_PUSH, uint16_t(cb), uint32_t(n));
}

extern "C" void ttrt_cb_wait_front(int32_t cb, int32_t n) {
    note("cb_wait_front", "cb=%lld, %lld pages", cb, n);
    Kernel& k = cur();
    CbConfig& c = cb_cfg(k, cb, "cb_wait_front");
    if (n < 0 || uint32_t(n) > c.num_pages) {
        fail("cb_wait_front: waits for " + std::to_string(n) + " pages but CB " + std::to_string(cb) + " holds " +
             std::to_string(c.num_pages) + " (this would wait forever on the device)");
    }
    CbView& v = k.cb[cb];
    check_contiguous(c, v.rd, n, cb, "cb_wait_front", "read");
    ++k.counters.cb_calls;
    record(k, EV_CB_WAIT, uint16_t(cb), uint32_t(n));
    Wait w;
    w.kind = WaitKind::CbFront;
    w.cb = cb;
    w.n = uint32_t(n);
    block_until(w);
    v.waited = std::max(v.waited, uint32_t(n));
}

extern "C" void ttrt_cb_pop_front(int32_t cb, int32_t n) {
    note("cb_pop_front", "cb=%lld, %lld pages", cb, n);
    Kernel& k = cur();
    CbConfig& c = cb_cfg(k, cb, "cb_pop_front");
    CbView& v = k.cb[cb];
    if (n < 0 || uint32_t(n) > v.waited) {
        fail("cb_pop_front: pops " + std::to_string(n) + " pages of CB " + std::to_string(cb) + " but only " +
             std::to_string(v.waited) + " were made visible by cb_wait_front (missing or too small cb_wait_front)");
    }
    const uint32_t bytes = uint32_t(n) * c.page_size;
    for (Kernel* o : k.core->k) {
        if (!o) continue;
        for (const PendingWrite& w : o->writes) {
            if (!w.flushed && overlaps(w.src, w.size, v.rd, bytes)) {
                fail("cb_pop_front: pops pages of CB " + std::to_string(cb) + " that are the source of an outstanding "
                     "noc_async_write (" + hex(w.src) + ", " + str(w.size) + " B) by the " + kind_name(o->kind) +
                     " kernel (missing noc_async_write_barrier or noc_async_writes_flushed before the pop)");
            }
        }
    }
    CbCounters& cc = k.core->cbc[cb];
    cc.acked += uint32_t(n);
    ++cc.pops;
    cc.front = advance(c, cc.front, n);
    v.rd = advance(c, v.rd, n);
    v.waited -= uint32_t(n);
    ++k.counters.cb_calls;
    record(k, EV_CB_POP, uint16_t(cb), uint32_t(n));
}

extern "C" bool ttrt_cb_pages_reservable_at_back(int32_t cb, int32_t n) {
    note("cb_pages_reservable_at_back", "cb=%lld, %lld pages", cb, n);
    Kernel& k = cur();
    CbConfig& c = cb_cfg(k, cb, "cb_pages_reservable_at_back");
    const CbCounters& cc = k.core->cbc[cb];
    return uint64_t(n) <= c.num_pages - (cc.received - cc.acked);
}

extern "C" bool ttrt_cb_pages_available_at_front(int32_t cb, int32_t n) {
    note("cb_pages_available_at_front", "cb=%lld, %lld pages", cb, n);
    Kernel& k = cur();
    cb_cfg(k, cb, "cb_pages_available_at_front");
    const CbCounters& cc = k.core->cbc[cb];
    return uint64_t(n) <= cc.received - cc.acked;
}

extern "C" uint32_t ttrt_get_write_ptr(uint32_t cb) {
    note("get_write_ptr", "cb=%llu", cb);
    Kernel& k = cur();
    cb_cfg(k, int32_t(cb), "get_write_ptr");
    return k.cb[cb].wr;
}

extern "C" uint32_t ttrt_get_read_ptr(uint32_t cb) {
    note("get_read_ptr", "cb=%llu", cb);
    Kernel& k = cur();
    cb_cfg(k, int32_t(cb), "get_read_ptr");
    if (k.cb[cb].waited == 0) {
        fail("get_read_ptr: CB " + std::to_string(cb) + " has no pages made visible by cb_wait_front in this kernel "
             "(the read pointer is only valid between cb_wait_front and cb_pop_front)");
    }
    return k.cb[cb].rd;
}

extern "C" uint32_t ttrt_compute_tile_address(uint32_t cb, uint32_t tile_index) {
    note("get_tile_address", "cb=%llu, tile %llu", cb, tile_index);
    Kernel& k = cur();
    CbConfig& c = cb_cfg(k, int32_t(cb), "get_tile_address");
    if (tile_index >= k.cb[cb].waited) {
        fail("get_tile_address: tile " + std::to_string(tile_index) + " of CB " + std::to_string(cb) + " but only " +
             std::to_string(k.cb[cb].waited) + " pages were made visible by cb_wait_front");
    }
    return k.cb[cb].rd + tile_index * c.page_size;
}

}  // namespace ttrt
