// The ttdecode host runtime: runs the kernels of a Metalium program (compiled against the API
// headers in ../include) on a modelled Wormhole, single-threaded, every kernel a cooperative fiber.
//
// Memory model: every core owns an L1 image (a memfd of 1464 KiB). The L1 of the core whose kernel is
// running is mapped at its device addresses [kWindowBase, kL1Size) of the host address space, so the
// device addresses kernels compute are valid host pointers. The engine reaches every core's L1 through
// a second mapping (`Core::l1`). DRAM is one byte array per (tensor, bank): kNumBanks regions of one
// block of anonymous memory per tensor (`Tensor::bank_data`).
#pragma once

#include <ucontext.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ttrt {

constexpr uint32_t kL1Size = 1464 * 1024;
constexpr uint32_t kWindowBase = 0x10000;  // L1 below this (firmware, mailboxes) is not mapped
constexpr uint32_t kUnreservedBase = 0x19D60;  // first CB byte (layout.L1_UNRESERVED_BASE): sems, args below
constexpr int kNumCbs = 32;
constexpr int kNumBanks = 12;
constexpr int kMaxDst = 16;
constexpr uint32_t kTileValues = 1024;
constexpr int NOC_LOCAL_BITS = 36;
// Poison byte: the L1 of every core at program start (outside what the host initialises), the
// destination of a transfer until it lands, and every output tensor. 0xFF.. reads as NaN in fp32,
// bf16, fp16, bfp8 and bfp4 (see runtime/README.md, Hazards).
constexpr uint8_t kPoison = 0xFF;  // NoC address: y << 42 | x << 36 | local address

enum class Kind : int { Reader = 0, Writer = 1, Compute = 2 };
const char* kind_name(Kind k);

struct CbConfig {
    bool present = false;
    uint32_t addr = 0, page_size = 0, num_pages = 0;
    uint8_t format = 0xff;  // tt DataFormat value
    // Rows of its tiles: 32 (32x32, faces 0-3), 16 (16x32: faces 0-1) or 8 (8x32: faces 0-1 of 8 rows,
    // face_r_dim 8).
    uint8_t rows = 32;
};

// Page counters shared by the producer and the consumer of a CB (as the device's tiles_received /
// tiles_acked registers).
struct CbCounters {
    uint64_t received = 0, acked = 0;
    uint64_t pushes = 0, pops = 0;
    uint32_t front = 0;  // address of the oldest page pushed and not yet popped (advanced by cb_pop_front)
};

// One kernel's private view of a CB (each RISC keeps its own read/write pointers on the device).
struct CbView {
    uint32_t rd = 0, wr = 0;        // byte addresses
    uint32_t reserved = 0;          // pages reserved and not yet pushed
    uint32_t waited = 0;            // pages made visible by cb_wait_front and not yet popped
    uint32_t pack_next = 0;         // next page for in-order pack_tile
};

enum class WaitKind { None, CbFront, CbBack, Sem, Landed };  // Landed: perturbed barriers (n = 0 reads, 1 writes, 2 incs)
struct Wait {
    WaitKind kind = WaitKind::None;
    int cb = 0;
    uint32_t n = 0;
    uint32_t addr = 0, value = 0;
    bool at_least = false;
};

struct PendingRead {
    uint32_t dst, size;
    size_t staging;           // offset of the snapshot of the source bytes (taken at issue)
    const uint8_t* source;    // the source bytes themselves (a perturbed run may read them when it lands)
    bool landed = false;      // perturbed runs: the data already arrived before the barrier
};

struct PendingWrite {
    uint32_t src, size;
    int dst_core;  // -1 for DRAM
    int dst_tensor, dst_bank;
    uint64_t dst_addr;  // L1 address, or offset inside the tensor's bank region
    size_t staging;
    bool flushed;  // source released by noc_async_writes_flushed
    const char* api;       // the issuing call and its NoC destination, for reports made when it lands
    uint64_t dst_noc;
    bool landed = false;   // perturbed runs: the data already arrived before the barrier
};

// A semaphore increment not yet visible at its target (perturbed runs only; it lands no later than
// the sender's noc_async_atomic_barrier).
struct PendingInc {
    int core;
    uint32_t addr, incr;
    bool landed = false;
};

// Program-order event of one kernel; consecutive equal events are merged into `count`.
struct Event {
    uint8_t op;
    uint8_t flag;
    uint16_t peer;
    uint32_t amount;
    uint32_t count;
    // compute events: the L1 bytes one call's unpackers fetch (or, for a pack, the packer writes) and
    // the tiles its unpackers unpack (each UNPACR's address calculation); 0 for other events
    uint32_t l1_bytes;
    uint16_t unpacks;
    uint16_t reserved;
};
static_assert(sizeof(Event) == 20, "Event is read by results.EVENT_DTYPE (20 bytes)");

enum EventOp : uint8_t {
    EV_READ_DRAM = 1, EV_READ_L1, EV_WRITE_DRAM, EV_WRITE_L1, EV_READ_BARRIER, EV_WRITE_BARRIER,
    EV_ATOMIC_BARRIER, EV_SEM_INC, EV_SEM_WAIT, EV_SEM_SET, EV_CB_RESERVE, EV_CB_PUSH, EV_CB_WAIT,
    EV_CB_POP, EV_COMPUTE, EV_BLOCKED
};

struct Counters {
    uint64_t dram_read[kNumBanks] = {}, dram_write[kNumBanks] = {};
    std::vector<uint64_t> noc_write_to, noc_read_from, sem_inc_to;  // per core index
    uint64_t cb_blocked = 0, sem_blocked = 0, cb_calls = 0, sem_waits = 0;
    std::vector<uint64_t> op_tiles;  // per ComputeOp
};

struct ComputeState;
struct Core;

struct Kernel {
    Core* core = nullptr;
    int slot = 0;
    Kind kind = Kind::Reader;
    std::string name, source, so_path;
    void (*entry)() = nullptr;
    void* handle = nullptr;
    ucontext_t ctx;
    char* stack = nullptr;
    size_t stack_size = 0;
    enum State { Ready, Blocked, Done } state = Ready;
    bool started = false;
    Wait wait;
    const char* last_call = "(kernel start)";
    const char* last_fmt = nullptr;       // printf format of the arguments (all %ll*), formatted on report
    unsigned long long last_argv[5] = {};
    CbView cb[kNumCbs];
    std::vector<PendingRead> reads;
    std::vector<PendingWrite> writes;
    std::vector<PendingInc> incs;  // perturbed runs: increments issued since the last atomic barrier
    uint32_t epoch[3] = {0, 0, 0};  // bumped when reads / writes / incs are cleared by their barrier
    std::vector<uint8_t> read_staging, write_staging;
    uint32_t atomics_outstanding = 0;
    ComputeState* cs = nullptr;
    Counters counters;
    std::vector<Event> events;
    uint32_t rta_addr = 0, crta_addr = 0, rta_count = 0, crta_count = 0;
    std::vector<uint32_t> rta_init, crta_init;  // written into L1 after the poison
    // compute settings
    int dst_tiles = 0, fidelity = 4;
    bool fp32_acc = false, approx = false, full_sync = false;
    uint32_t unpack_to_dest = 0;  // bit i: CB i is unpacked straight to DST (UnpackToDestFp32)
};

// One core's shard of a height-sharded L1 tensor: `size` bytes at L1 address `addr`, loaded from
// `in_path` before the run (an output: poisoned) and, with `out_path`, written there after it.
struct L1Shard {
    uint32_t addr = 0, size = 0;
    std::string in_path, out_path;
};

struct Core {
    int index = 0;
    int lx = 0, ly = 0, nx = 0, ny = 0;
    int fd = -1;
    uint8_t* l1 = nullptr;
    CbConfig cbcfg[kNumCbs];
    CbCounters cbc[kNumCbs];
    uint32_t sem_base = 0;
    int num_sems = 0;
    std::vector<std::pair<uint32_t, uint32_t>> sem_init;  // (id, initial value), written after the poison
    uint32_t top = kL1Size;  // end of the L1 the window maps: the highest CB, page aligned
    std::vector<L1Shard> shards;  // L1 tensor shards this core holds (reached over the NoC)
    Kernel* k[3] = {nullptr, nullptr, nullptr};
};

struct Tensor {
    std::string name;
    uint32_t base = 0, page_size = 0, aligned_page = 0, num_pages = 0, per_bank = 0;
    std::string in_path, out_path;
    uint8_t* image = nullptr;  // the banks' bytes: bank b at b * per_bank, per_bank bytes each
    bool written = false;
    uint8_t* bank_data(int b) const { return image + size_t(b) * per_bank; }
};

// A transfer or increment in flight that a perturbed run may land early: kernel, kind (0 read,
// 1 write, 2 semaphore increment), index in that kernel's list and the list's epoch at issue.
// g.in_flight is a min-heap on `due`.
struct InFlight {
    Kernel* k;
    uint8_t kind;
    uint32_t index, epoch;
    uint64_t due;  // perturbation tick at which it lands, unless its barrier or an idle machine lands it first
};

struct Engine {
    std::vector<Core*> cores;
    std::vector<Tensor> tensors;
    std::vector<Kernel*> kernels;
    uint32_t dram_bank_offset[kNumBanks] = {};
    int dram_bank_x[kNumBanks] = {}, dram_bank_y[kNumBanks] = {};
    double watchdog_seconds = 2.0;
    std::string out_dir;
    ucontext_t sched_ctx;
    Kernel* cur = nullptr;
    int window_core = -1;
    // Schedule perturbation (program line `perturb <seed>`); off: the deterministic schedule.
    bool perturb = false;
    uint64_t rng = 0;
    uint32_t yield_one_in = 0;  // per API call: chance 1/n to be preempted
    uint32_t max_delay = 0;     // a transfer or increment lands 0 .. max_delay-1 ticks after issue
    uint64_t tick = 0;          // API calls made so far (the clock of a perturbed run)
    std::vector<InFlight> in_flight;
};

extern Engine g;

// ---- engine services used by the API implementations ----
[[noreturn]] void fail(const std::string& message);
[[noreturn]] void fail_kind(const char* kind, const std::string& message);
std::string hex(uint64_t v);
std::string core_name(const Core* c);
std::string kernel_label(const Kernel* k);
Kernel& cur();
// Records the API call a kernel is in (formatted only when a report needs it).
void note_raw(const char* api, const char* fmt, const unsigned long long* argv, int argc);
inline void note(const char* api) { note_raw(api, nullptr, nullptr, 0); }
template <typename... A>
inline void note(const char* api, const char* fmt, A... a) {
    const unsigned long long argv[] = {(unsigned long long)(a)...};
    note_raw(api, fmt, argv, int(sizeof...(A)));
}
std::string call_text(const Kernel& k);  // "api(args)"
void block_until(const Wait& w);
bool wait_satisfied(const Kernel& k);
std::string describe_wait(const Kernel& k);
void record(Kernel& k, uint8_t op, uint16_t peer, uint32_t amount, uint8_t flag = 0, uint32_t l1_bytes = 0,
            uint16_t unpacks = 0);

// L1 of the running core at a device address, checked to lie in the mapped window.
uint8_t* l1_ptr(Core& c, uint32_t addr, uint32_t size, const char* what);
// Kernel exit checks (pending transfers, reserved pages).
void check_kernel_end(Kernel& k);

// ---- schedule perturbation (engine.cpp, noc.cpp) ----
uint64_t next_random();                  // xorshift; only perturbed runs draw from it
void perturb_point();                    // at every API call of a perturbed run: land what is due, maybe yield
void add_in_flight(Kernel& k, uint8_t kind, uint32_t index);  // a new transfer/increment, due at random
bool land_one_in_flight();               // land the next transfer/increment due; false if none is left
void land(const InFlight& f);            // (noc.cpp) deliver one, if still outstanding
bool all_landed(const Kernel& k, int kind);  // (noc.cpp) no transfer/increment of that kind in flight
void wait_landed(int kind);              // a perturbed barrier: block until the kernel's own have landed
[[noreturn]] void fail_for(const Kernel* k, const std::string& message);  // error blamed on kernel k
// The CB of core `c` whose pages pushed and not yet popped overlap [addr, addr+size), or -1; the
// overlapping page range in *first / *last. Pages the kernel `holder` itself waited for are exempt.
int cb_unreleased_overlap(const Core& c, uint32_t addr, uint32_t size, const Kernel* holder, uint32_t* first,
                          uint32_t* last);

uint32_t cb_limit(const CbConfig& c);  // end address of a CB
// `size` bytes of fresh anonymous memory: zero, each page allocated when first touched (so memory
// nothing touches costs nothing, and nothing is cleared twice). Never freed (the run is one process).
uint8_t* zeroed_pages(size_t size, const std::string& what);
bool overlaps(uint32_t a, uint32_t an, uint32_t b, uint32_t bn);
// DRAM bank of a NoC (x, y) or -1; and tensor lookup within a bank.
int dram_channel_of(int x, int y);
Core* core_at_noc(int x, int y);

}  // namespace ttrt
