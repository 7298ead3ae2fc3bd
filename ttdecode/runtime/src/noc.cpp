// NoC transfers, barriers and semaphores of the ttdecode host runtime. A transfer copies a snapshot of
// its source at issue and lands at its barrier; until then the destination holds poison (0xFF). In a
// perturbed run (engine.cpp) transfers and semaphore increments may land at any API call before
// their barrier.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "compute.hpp"
#include "engine.hpp"

namespace ttrt {

constexpr uint64_t kBankHalf = 1ull << 30;  // two banks per DRAM channel: offsets 0 and 1 GiB

static std::string str(uint64_t v) { return std::to_string(v); }

// ------------------------------------------------------------------ NoC addressing

int dram_channel_of(int x, int y) {
    for (int b = 0; b < kNumBanks; ++b) {
        if (g.dram_bank_x[b] == x && g.dram_bank_y[b] == y) return b / 2;
    }
    return -1;
}

Core* core_at_noc(int x, int y) {
    for (Core* c : g.cores) {
        if (c->nx == x && c->ny == y) return c;
    }
    return nullptr;
}

// Is [addr, addr+size) inside one CB, one L1 tensor shard or the semaphores of `c`?
static bool in_l1_region(const Core& c, uint32_t addr, uint32_t size) {
    for (const CbConfig& cfg : c.cbcfg) {
        if (cfg.present && addr >= cfg.addr && uint64_t(addr) + size <= cb_limit(cfg)) return true;
    }
    for (const L1Shard& sh : c.shards) {
        if (addr >= sh.addr && uint64_t(addr) + size <= uint64_t(sh.addr) + sh.size) return true;
    }
    return c.num_sems && addr >= c.sem_base && uint64_t(addr) + size <= c.sem_base + 16ull * c.num_sems;
}

static std::string l1_regions(const Core& c) {
    std::string s;
    for (int i = 0; i < kNumCbs; ++i) {
        const CbConfig& cfg = c.cbcfg[i];
        if (cfg.present) s += " CB" + std::to_string(i) + " " + hex(cfg.addr) + ".." + hex(cb_limit(cfg)) + ";";
    }
    for (const L1Shard& sh : c.shards) s += " L1 shard " + hex(sh.addr) + ".." + hex(sh.addr + sh.size) + ";";
    if (c.num_sems) s += " semaphores " + hex(c.sem_base) + ".." + hex(c.sem_base + 16 * c.num_sems) + ";";
    return s.empty() ? " none" : s;
}

static uint8_t* write_destination(const PendingWrite& w);

struct Target {
    Core* core = nullptr;  // worker L1
    Tensor* tensor = nullptr;
    int bank = -1;
    uint64_t local = 0;   // L1 address, or offset in the tensor's bank region
    uint8_t* bytes = nullptr;
    uint32_t align_mask = 15;
};

static Target resolve(uint64_t noc_addr, uint32_t size, bool is_read, const char* api) {
    Target t;
    const int x = int((noc_addr >> NOC_LOCAL_BITS) & 0x3F);
    const int y = int((noc_addr >> (NOC_LOCAL_BITS + 6)) & 0x3F);
    const uint64_t local = noc_addr & ((1ull << NOC_LOCAL_BITS) - 1);
    if (Core* c = core_at_noc(x, y)) {
        if (!in_l1_region(*c, uint32_t(local), size) || local + size > kL1Size) {
            fail(std::string(api) + ": " + (is_read ? "reads " : "writes ") + str(size) + " B at " + hex(local) + " of " +
                 core_name(c) + ", outside its CBs and semaphores (regions:" + l1_regions(*c) + ")");
        }
        t.core = c;
        t.local = local;
        t.bytes = c->l1 + local;
        return t;
    }
    const int ch = dram_channel_of(x, y);
    if (ch < 0) {
        fail(std::string(api) + ": NoC address " + hex(noc_addr) + " targets (x=" + std::to_string(x) + ", y=" +
             std::to_string(y) + "), which is neither a worker core of this program nor a DRAM bank");
    }
    const int bank = 2 * ch + (local >= kBankHalf ? 1 : 0);
    const uint64_t off = local - g.dram_bank_offset[bank];
    for (Tensor& ten : g.tensors) {
        if (off >= ten.base && off + size <= uint64_t(ten.base) + ten.per_bank) {
            t.tensor = &ten;
            t.bank = bank;
            t.local = off - ten.base;
            t.bytes = ten.bank_data(bank) + t.local;
            t.align_mask = is_read ? 31 : 15;
            return t;
        }
    }
    std::string have;
    for (const Tensor& ten : g.tensors) {
        have += " '" + ten.name + "' " + hex(ten.base) + ".." + hex(uint64_t(ten.base) + ten.per_bank) + ";";
    }
    fail(std::string(api) + ": " + (is_read ? "reads " : "writes ") + str(size) + " B at " + hex(off) + " of DRAM bank " +
         std::to_string(bank) + ", not inside one tensor (tensors per bank:" + (have.empty() ? " none" : have) + ")");
}

static void check_alignment(uint32_t l1, const Target& t, const char* api, bool is_read) {
    if ((l1 & t.align_mask) != (uint32_t(t.local + (t.tensor ? t.tensor->base : 0)) & t.align_mask)) {
        fail(std::string(api) + ": misaligned transfer: local L1 address " + hex(l1) + " and the " +
             (t.tensor ? "DRAM" : "remote L1") + " address must agree modulo " + std::to_string(t.align_mask + 1) +
             " B (Wormhole NoC " + (t.tensor ? (is_read ? "DRAM read" : "DRAM write") : "L1") + " alignment)");
    }
}

static void count_transfer(Kernel& k, const Target& t, uint32_t size, bool is_read) {
    if (t.tensor) {
        (is_read ? k.counters.dram_read : k.counters.dram_write)[t.bank] += size;
        record(k, is_read ? EV_READ_DRAM : EV_WRITE_DRAM, uint16_t(t.bank), size);
    } else {
        (is_read ? k.counters.noc_read_from : k.counters.noc_write_to)[t.core->index] += size;
        record(k, is_read ? EV_READ_L1 : EV_WRITE_L1, uint16_t(t.core->index), size);
    }
}

// ------------------------------------------------------------------ NoC transfers

// Write-after-read: a NoC write must not land in CB pages of its target that were pushed and not yet
// popped there (its consumer may still be reading them). Pages the target has reserved, or that are
// free, may be written. Checked when the write is issued and again when it lands.
static void check_write_after_read(const Kernel& k, const PendingWrite& w) {
    const Core& dst = *g.cores[w.dst_core];
    uint32_t first = 0, last = 0;
    const int cb = cb_unreleased_overlap(dst, uint32_t(w.dst_addr), w.size, &k, &first, &last);
    if (cb < 0) return;
    const CbCounters& n = dst.cbc[cb];
    char call[160];
    std::snprintf(call, sizeof call, "%s(src=0x%x, dst=0x%llx, %u B)", w.api, w.src, (unsigned long long)w.dst_noc,
                  w.size);
    fail_for(&k, std::string("write-after-read hazard: ") + call + " by " + kernel_label(&k) + " writes into " +
                     (first == last ? "page " + str(first) : "pages " + str(first) + ".." + str(last)) + " of CB " +
                     str(cb) + " of " + core_name(&dst) + ", which " + core_name(&dst) +
                     " has pushed and not yet popped (" + str(n.received - n.acked) +
                     " pages in use there): its consumer may still be reading them. Write only into pages the "
                     "receiver has reserved or released with cb_pop_front, and let it signal that first.");
}

bool all_landed(const Kernel& k, int kind) {
    if (kind == 0) {
        for (const PendingRead& r : k.reads) if (!r.landed) return false;
    } else if (kind == 1) {
        for (const PendingWrite& w : k.writes) if (!w.landed) return false;
    } else {
        for (const PendingInc& i : k.incs) if (!i.landed) return false;
    }
    return true;
}

// Lands one transfer or increment in flight (perturbed runs): its bytes or its increment arrive now.
void land(const InFlight& f) {
    Kernel& k = *f.k;
    if (f.kind == 0) {
        PendingRead& r = k.reads[f.index];
        // The NoC reads the source some time between issue and arrival: now, or as it was at issue.
        const uint8_t* from = next_random() & 1 ? r.source : k.read_staging.data() + r.staging;
        std::memmove(k.core->l1 + r.dst, from, r.size);
        r.landed = true;
    } else if (f.kind == 1) {
        PendingWrite& w = k.writes[f.index];
        if (w.dst_core >= 0) check_write_after_read(k, w);
        std::memcpy(write_destination(w), k.write_staging.data() + w.staging, w.size);
        w.landed = true;
    } else {
        PendingInc& inc = k.incs[f.index];
        uint8_t* p = g.cores[inc.core]->l1 + inc.addr;
        uint32_t v;
        std::memcpy(&v, p, 4);
        v += inc.incr;
        std::memcpy(p, &v, 4);
        inc.landed = true;
    }
}

extern "C" void ttrt_noc_read(uint64_t src, uint32_t dst, uint32_t size, const char* api) {
    note(api, "src=0x%llx, dst=0x%llx, %llu B", src, dst, size);
    Kernel& k = cur();
    Core& me = *k.core;
    if (size == 0) return;
    l1_ptr(me, dst, size, api);
    if (!in_l1_region(me, dst, size)) {
        fail(std::string(api) + ": destination " + hex(dst) + " (" + str(size) + " B) is outside the CBs and "
             "semaphores of " + core_name(&me) + " (regions:" + l1_regions(me) + ")");
    }
    Target t = resolve(src, size, true, api);
    check_alignment(dst, t, api, true);
    for (Kernel* o : me.k) {
        if (!o) continue;
        for (const PendingWrite& w : o->writes) {
            if (!w.flushed && overlaps(w.src, w.size, dst, size)) {
                fail(std::string(api) + ": reads into " + hex(dst) + ", the source of an outstanding noc_async_write "
                     "(missing noc_async_write_barrier before reusing the buffer)");
            }
        }
    }
    uint32_t first = 0, last = 0;
    const int busy = cb_unreleased_overlap(me, dst, size, &k, &first, &last);
    if (busy >= 0) {
        fail(std::string(api) + ": write-after-read hazard: reads into " +
             (first == last ? "page " + str(first) : "pages " + str(first) + ".." + str(last)) + " of CB " +
             str(busy) + ", which " + core_name(&me) + " has pushed and not yet popped (its consumer may still be "
             "reading them); read only into pages reserved with cb_reserve_back");
    }
    PendingRead r{dst, size, k.read_staging.size(), t.bytes};
    k.read_staging.insert(k.read_staging.end(), t.bytes, t.bytes + size);
    k.reads.push_back(r);
    std::memset(me.l1 + dst, kPoison, size);  // until it lands the data has not arrived
    if (g.perturb) add_in_flight(k, 0, uint32_t(k.reads.size() - 1));
    count_transfer(k, t, size, true);
}

extern "C" void ttrt_noc_write(uint32_t src, uint64_t dst, uint32_t size, const char* api) {
    note(api, "src=0x%llx, dst=0x%llx, %llu B", src, dst, size);
    Kernel& k = cur();
    Core& me = *k.core;
    if (size == 0) return;
    l1_ptr(me, src, size, api);
    if (!in_l1_region(me, src, size)) {
        fail(std::string(api) + ": source " + hex(src) + " (" + str(size) + " B) is outside the CBs and semaphores of " +
             core_name(&me) + " (regions:" + l1_regions(me) + ")");
    }
    Target t = resolve(dst, size, false, api);
    check_alignment(src, t, api, false);
    PendingWrite w{src, size, t.core ? t.core->index : -1, -1, t.bank, t.local, k.write_staging.size(), false,
                   api, dst};
    if (t.tensor) {
        w.dst_tensor = int(t.tensor - g.tensors.data());
        t.tensor->written = true;
    } else {
        check_write_after_read(k, w);
    }
    k.write_staging.insert(k.write_staging.end(), me.l1 + src, me.l1 + src + size);
    k.writes.push_back(w);
    std::memset(t.bytes, kPoison, size);  // the destination holds no valid data until the write lands
    if (g.perturb) add_in_flight(k, 1, uint32_t(k.writes.size() - 1));
    count_transfer(k, t, size, false);
}

static uint8_t* write_destination(const PendingWrite& w) {
    if (w.dst_core >= 0) return g.cores[w.dst_core]->l1 + w.dst_addr;
    return g.tensors[w.dst_tensor].bank_data(w.dst_bank) + w.dst_addr;
}

static void check_write_sources(Kernel& k, const char* api) {
    for (PendingWrite& w : k.writes) {
        if (!w.flushed && std::memcmp(k.write_staging.data() + w.staging, k.core->l1 + w.src, w.size) != 0) {
            fail(std::string(api) + ": the source " + hex(w.src) + " (" + str(w.size) + " B) of a noc_async_write was "
                 "modified before the write completed (reuse the buffer only after noc_async_write_barrier or "
                 "noc_async_writes_flushed)");
        }
    }
}

extern "C" void ttrt_noc_read_barrier(void) {
    note("noc_async_read_barrier");
    Kernel& k = cur();
    if (g.perturb) wait_landed(0);
    for (const PendingRead& r : k.reads) {
        if (!r.landed) std::memcpy(k.core->l1 + r.dst, k.read_staging.data() + r.staging, r.size);
    }
    record(k, EV_READ_BARRIER, 0, uint32_t(k.reads.size()));
    k.reads.clear();
    k.read_staging.clear();
    ++k.epoch[0];
}

extern "C" void ttrt_noc_writes_flushed(void) {
    note("noc_async_writes_flushed");
    Kernel& k = cur();
    check_write_sources(k, "noc_async_writes_flushed");
    for (PendingWrite& w : k.writes) w.flushed = true;
}

extern "C" void ttrt_noc_write_barrier(void) {
    note("noc_async_write_barrier");
    Kernel& k = cur();
    check_write_sources(k, "noc_async_write_barrier");
    if (g.perturb) wait_landed(1);
    for (const PendingWrite& w : k.writes) {
        if (w.landed) continue;
        if (w.dst_core >= 0) check_write_after_read(k, w);
        std::memcpy(write_destination(w), k.write_staging.data() + w.staging, w.size);
    }
    record(k, EV_WRITE_BARRIER, 0, uint32_t(k.writes.size()));
    k.writes.clear();
    k.write_staging.clear();
    ++k.epoch[1];
}

extern "C" void ttrt_noc_atomic_barrier(void) {
    note("noc_async_atomic_barrier");
    Kernel& k = cur();
    record(k, EV_ATOMIC_BARRIER, 0, k.atomics_outstanding);
    // Every increment of this kernel has completed at its target when the barrier returns.
    if (g.perturb) wait_landed(2);
    k.incs.clear();
    ++k.epoch[2];
    k.atomics_outstanding = 0;
}

extern "C" void ttrt_noc_full_barrier(void) {
    ttrt_noc_read_barrier();
    ttrt_noc_write_barrier();
    ttrt_noc_atomic_barrier();
    note("noc_async_full_barrier");
}

// ------------------------------------------------------------------ semaphores

static uint32_t local_addr(Kernel& k, volatile uint32_t* p, const char* api) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (a < kWindowBase || a + 4 > kL1Size || (a & 3)) {
        fail(std::string(api) + ": " + hex(a) + " is not a 4-byte aligned L1 address of " + core_name(k.core));
    }
    if (!in_l1_region(*k.core, uint32_t(a), 4)) {
        fail(std::string(api) + ": " + hex(a) + " is outside the CBs and semaphores of " + core_name(k.core) +
             " (regions:" + l1_regions(*k.core) + ")");
    }
    return uint32_t(a);
}

extern "C" void ttrt_sem_inc(uint64_t dst, uint32_t incr) {
    note("noc_semaphore_inc", "addr=0x%llx, +%llu", dst, incr);
    Kernel& k = cur();
    const int x = int((dst >> NOC_LOCAL_BITS) & 0x3F), y = int((dst >> (NOC_LOCAL_BITS + 6)) & 0x3F);
    const uint64_t local = dst & ((1ull << NOC_LOCAL_BITS) - 1);
    Core* c = core_at_noc(x, y);
    if (!c) {
        fail("noc_semaphore_inc: NoC address " + hex(dst) + " targets (x=" + std::to_string(x) + ", y=" +
             std::to_string(y) + "), which is not a worker core of this program");
    }
    if (!c->num_sems || local < c->sem_base || local + 4 > c->sem_base + 16ull * c->num_sems || (local & 3)) {
        fail("noc_semaphore_inc: " + hex(local) + " is not a semaphore of " + core_name(c) + " (semaphores: " +
             (c->num_sems ? hex(c->sem_base) + ".." + hex(c->sem_base + 16 * c->num_sems) : std::string("none")) + ")");
    }
    size_t pending = 0;
    for (const PendingWrite& w : k.writes) pending += (w.dst_core == c->index);
    if (pending) {
        fail("noc_semaphore_inc: signals " + core_name(c) + " while " + std::to_string(pending) +
             " noc_async_write(s) to it are outstanding; the data may land after the signal (call "
             "noc_async_write_barrier first)");
    }
    if (g.perturb) {
        // Visible at the target some time before the sender's noc_async_atomic_barrier returns.
        k.incs.push_back(PendingInc{c->index, uint32_t(local), incr});
        add_in_flight(k, 2, uint32_t(k.incs.size() - 1));
    } else {
        uint32_t v;
        std::memcpy(&v, c->l1 + local, 4);
        v += incr;
        std::memcpy(c->l1 + local, &v, 4);
    }
    ++k.atomics_outstanding;
    ++k.counters.sem_inc_to[c->index];
    record(k, EV_SEM_INC, uint16_t(c->index), incr);
}

extern "C" void ttrt_sem_set(volatile uint32_t* sem, uint32_t value) {
    note("noc_semaphore_set", "addr=0x%llx, %llu", uintptr_t(sem), value);
    Kernel& k = cur();
    const uint32_t a = local_addr(k, sem, "noc_semaphore_set");
    std::memcpy(k.core->l1 + a, &value, 4);
    record(k, EV_SEM_SET, 0, value);
}

extern "C" void ttrt_sem_wait(volatile uint32_t* sem, uint32_t value, int at_least) {
    const char* api = at_least ? "noc_semaphore_wait_min" : "noc_semaphore_wait";
    note(api, at_least ? "addr=0x%llx, >=%llu" : "addr=0x%llx, ==%llu", uintptr_t(sem), value);
    Kernel& k = cur();
    Wait w;
    w.kind = WaitKind::Sem;
    w.addr = local_addr(k, sem, api);
    w.value = value;
    w.at_least = at_least != 0;
    ++k.counters.sem_waits;
    record(k, EV_SEM_WAIT, 0, value);
    block_until(w);
}

// ------------------------------------------------------------------ misc

extern "C" void ttrt_note_call(const char* api) { note(api); }

extern "C" void ttrt_dprint(const char* line) {
    Kernel& k = cur();
    std::fprintf(stderr, "DPRINT %s %s: %s\n", core_name(k.core).c_str(), kind_name(k.kind), line);
}

extern "C" [[noreturn]] void ttrt_fail(const char* message) { fail(message); }

extern "C" void ttrt_bad_arg_index(int common, int idx, uint32_t count) {
    note(common ? "get_common_arg_val" : "get_arg_val", "%lld", idx);
    fail(std::string(common ? "get_common_arg_val" : "get_arg_val") + ": index " + std::to_string(idx) + " but the " +
         (common ? "kernel has " : "core has ") + std::to_string(count) + (common ? " common" : "") + " runtime args");
}

void check_kernel_end(Kernel& k) {
    if (!k.reads.empty()) {
        fail("kernel ended with " + std::to_string(k.reads.size()) +
             " outstanding noc_async_read(s) (missing noc_async_read_barrier)");
    }
    if (!k.writes.empty()) {
        fail("kernel ended with " + std::to_string(k.writes.size()) +
             " outstanding noc_async_write(s) (missing noc_async_write_barrier)");
    }
    if (k.atomics_outstanding) {
        fail("kernel ended with " + std::to_string(k.atomics_outstanding) +
             " outstanding semaphore increment(s) (missing noc_async_atomic_barrier)");
    }
    for (int cb = 0; cb < kNumCbs; ++cb) {
        if (k.cb[cb].reserved) {
            fail("kernel ended with " + std::to_string(k.cb[cb].reserved) + " pages of CB " + std::to_string(cb) +
                 " reserved but never pushed");
        }
    }
    if (k.cs) check_compute_end(k);
}

}  // namespace ttrt
