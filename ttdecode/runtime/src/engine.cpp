// Scheduler, fibers, L1 window, diagnostics of the ttdecode host runtime.
#include "engine.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "report.hpp"

namespace ttrt {

Engine g;
std::atomic<uint64_t> g_progress{0};

const char* kind_name(Kind k) {
    switch (k) {
        case Kind::Reader: return "reader";
        case Kind::Writer: return "writer";
        case Kind::Compute: return "compute";
    }
    return "?";
}

std::string hex(uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", (unsigned long long)v);
    return buf;
}

std::string core_name(const Core* c) {
    return "core (" + std::to_string(c->lx) + ", " + std::to_string(c->ly) + ")";
}

std::string kernel_label(const Kernel* k) {
    return core_name(k->core) + " " + kind_name(k->kind) + " kernel '" + k->name + "' (" + k->source + ")";
}

Kernel& cur() {
    if (!g.cur) {
        fail_kind("internal", "a kernel API call arrived while no kernel was running");
    }
    return *g.cur;
}

void note_raw(const char* api, const char* fmt, const unsigned long long* argv, int argc) {
    g_progress.fetch_add(1, std::memory_order_relaxed);
    Kernel& k = cur();
    k.last_call = api;
    k.last_fmt = fmt;
    for (int i = 0; i < argc && i < 5; ++i) k.last_argv[i] = argv[i];
    if (g.perturb) perturb_point();
}

std::string call_text(const Kernel& k) {
    std::string s = k.last_call ? k.last_call : "?";
    if (k.last_fmt) {
        char buf[200];
        const unsigned long long* a = k.last_argv;
        std::snprintf(buf, sizeof buf, k.last_fmt, a[0], a[1], a[2], a[3], a[4]);
        s += "(" + std::string(buf) + ")";
    }
    return s;
}

void record(Kernel& k, uint8_t op, uint16_t peer, uint32_t amount, uint8_t flag, uint32_t l1_bytes, uint16_t unpacks) {
    if (!k.events.empty()) {
        Event& e = k.events.back();
        if (e.op == op && e.peer == peer && e.amount == amount && e.flag == flag && e.l1_bytes == l1_bytes &&
            e.unpacks == unpacks && e.count < 0xFFFFFFFFu) {
            ++e.count;
            return;
        }
    }
    k.events.push_back(Event{op, flag, peer, amount, 1, l1_bytes, unpacks, 0});
}

// ------------------------------------------------------------------ waits

bool wait_satisfied(const Kernel& k) {
    const Wait& w = k.wait;
    const Core& c = *k.core;
    switch (w.kind) {
        case WaitKind::None: return true;
        case WaitKind::CbFront: {
            const CbCounters& n = c.cbc[w.cb];
            return n.received - n.acked >= w.n;
        }
        case WaitKind::CbBack: {
            const CbCounters& n = c.cbc[w.cb];
            return c.cbcfg[w.cb].num_pages - (n.received - n.acked) >= w.n;
        }
        case WaitKind::Sem: {
            uint32_t v;
            std::memcpy(&v, c.l1 + w.addr, 4);
            return w.at_least ? v >= w.value : v == w.value;
        }
        case WaitKind::Landed: return all_landed(k, int(w.n));
    }
    return true;
}

std::string describe_wait(const Kernel& k) {
    const Wait& w = k.wait;
    const Core& c = *k.core;
    std::ostringstream s;
    switch (w.kind) {
        case WaitKind::None: s << "running"; break;
        case WaitKind::CbFront:
        case WaitKind::CbBack: {
            const CbCounters& n = c.cbc[w.cb];
            const uint64_t avail = n.received - n.acked;
            if (w.kind == WaitKind::CbFront) {
                s << "cb_wait_front(cb=" << w.cb << ", " << w.n << " pages): " << avail << " pages available";
            } else {
                s << "cb_reserve_back(cb=" << w.cb << ", " << w.n << " pages): "
                  << (c.cbcfg[w.cb].num_pages - avail) << " pages free";
            }
            s << " (capacity " << c.cbcfg[w.cb].num_pages << " pages; " << n.received << " pushed, " << n.acked
              << " popped so far)";
            break;
        }
        case WaitKind::Sem: {
            uint32_t v;
            std::memcpy(&v, c.l1 + w.addr, 4);
            s << (w.at_least ? "noc_semaphore_wait_min" : "noc_semaphore_wait") << "(addr " << hex(w.addr);
            if (c.num_sems && w.addr >= c.sem_base && w.addr < c.sem_base + 16u * c.num_sems) {
                s << " = semaphore " << (w.addr - c.sem_base) / 16;
            }
            s << "): value " << v << ", waiting for " << (w.at_least ? ">= " : "== ") << w.value;
            break;
        }
        case WaitKind::Landed:
            s << (w.n == 0 ? "noc_async_read_barrier" : w.n == 1 ? "noc_async_write_barrier" : "noc_async_atomic_barrier")
              << ": transactions still in flight";
            break;
    }
    return s.str();
}

void block_until(const Wait& w) {
    Kernel& k = cur();
    k.wait = w;
    if (wait_satisfied(k)) {
        k.wait.kind = WaitKind::None;
        return;
    }
    if (w.kind == WaitKind::Sem) {
        ++k.counters.sem_blocked;
    } else {
        ++k.counters.cb_blocked;
    }
    record(k, EV_BLOCKED, (uint16_t)w.kind, w.kind == WaitKind::Sem ? w.value : w.n);
    k.state = Kernel::Blocked;
    swapcontext(&k.ctx, &g.sched_ctx);
    // The scheduler resumes a blocked kernel only once its condition holds.
    k.state = Kernel::Ready;
    k.wait.kind = WaitKind::None;
}

// ------------------------------------------------------------------ L1 window

static void map_window(int core_index);
static void map_window_for(Kernel& k) { map_window(k.core->index); }

static void map_window(int core_index) {
    if (g.window_core == core_index) {
        return;
    }
    Core& c = *g.cores[core_index];
    const uint32_t prev_top = g.window_core >= 0 ? g.cores[g.window_core]->top : kWindowBase;
    void* p = mmap(reinterpret_cast<void*>(uintptr_t(kWindowBase)), c.top - kWindowBase, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED, c.fd, kWindowBase);
    if (p == MAP_FAILED || p != reinterpret_cast<void*>(uintptr_t(kWindowBase))) {
        fail_kind("internal", "cannot map the L1 window of " + core_name(&c) + ": " + std::strerror(errno));
    }
    if (prev_top > c.top) {  // the previous core's L1 reached higher: unmap the difference again
        void* q = mmap(reinterpret_cast<void*>(uintptr_t(c.top)), prev_top - c.top, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (q == MAP_FAILED) fail_kind("internal", std::string("cannot unmap unallocated L1: ") + std::strerror(errno));
    }
    g.window_core = core_index;
}

void reserve_window() {
    void* want = reinterpret_cast<void*>(uintptr_t(kWindowBase));
    void* p = mmap(want, kL1Size - kWindowBase, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != want) {
        fail_kind("internal", "cannot reserve host addresses " + hex(kWindowBase) + ".." + hex(kL1Size) +
                                  " for the L1 window (" + std::strerror(errno) +
                                  "); check /proc/sys/vm/mmap_min_addr <= 65536");
    }
}

uint8_t* zeroed_pages(size_t size, const std::string& what) {
    if (size == 0) return nullptr;
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail_kind("internal", "cannot allocate " + std::to_string(size) + " B for " + what + ": " +
                                                   std::strerror(errno));
    return static_cast<uint8_t*>(p);
}

uint8_t* l1_ptr(Core& c, uint32_t addr, uint32_t size, const char* what) {
    if (addr < kWindowBase || uint64_t(addr) + size > kL1Size) {
        fail(std::string(what) + ": L1 range " + hex(addr) + ".." + hex(uint64_t(addr) + size) + " of " + core_name(&c) +
             " is outside the kernel-visible L1 (" + hex(kWindowBase) + ".." + hex(kL1Size) + ")");
    }
    return c.l1 + addr;
}

// ------------------------------------------------------------------ fibers and scheduler

static void fiber_main() {
    Kernel& k = *g.cur;
    k.entry();
    g_progress.fetch_add(1, std::memory_order_relaxed);
    k.last_call = "(kernel end)";
    k.last_fmt = nullptr;
    check_kernel_end(k);
    k.state = Kernel::Done;
    swapcontext(&k.ctx, &g.sched_ctx);
}

static void start_fiber(Kernel& k) {
    const size_t guard = 4096;
    k.stack_size = 1 << 20;
    void* mem = mmap(nullptr, k.stack_size + guard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (mem == MAP_FAILED) {
        fail_kind("internal", "cannot allocate a fiber stack for " + kernel_label(&k));
    }
    mprotect(mem, guard, PROT_NONE);  // stack overflow faults instead of corrupting memory
    k.stack = static_cast<char*>(mem);
    getcontext(&k.ctx);
    k.ctx.uc_stack.ss_sp = k.stack + guard;
    k.ctx.uc_stack.ss_size = k.stack_size;
    k.ctx.uc_link = nullptr;
    makecontext(&k.ctx, fiber_main, 0);
    k.started = true;
}

static void run_kernel(Kernel& k) {
    map_window(k.core->index);
    g.cur = &k;
    swapcontext(&g.sched_ctx, &k.ctx);
    g.cur = nullptr;
}

// ------------------------------------------------------------------ schedule perturbation
//
// A perturbed run (seeded) draws every choice from one xorshift stream, so a seed replays exactly.
// At every API call a kernel may land one transfer or semaphore increment in flight (of any kernel)
// and may yield; the scheduler then picks the next kernel at random among the runnable ones.

uint64_t next_random() {
    uint64_t x = g.rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return g.rng = x;
}

static bool later(const InFlight& a, const InFlight& b) { return a.due > b.due; }

void add_in_flight(Kernel& k, uint8_t kind, uint32_t index) {
    g.in_flight.push_back(InFlight{&k, kind, index, k.epoch[kind], g.tick + next_random() % g.max_delay});
    std::push_heap(g.in_flight.begin(), g.in_flight.end(), later);
}

// Pops the earliest item of the heap; lands it unless its barrier already did. True if it landed.
static bool land_front() {
    std::pop_heap(g.in_flight.begin(), g.in_flight.end(), later);
    const InFlight f = g.in_flight.back();
    g.in_flight.pop_back();
    const size_t list_size = f.kind == 0 ? f.k->reads.size() : f.kind == 1 ? f.k->writes.size() : f.k->incs.size();
    if (f.epoch != f.k->epoch[f.kind] || f.index >= list_size) return false;  // its barrier already landed it
    const bool landed = f.kind == 0 ? f.k->reads[f.index].landed
                        : f.kind == 1 ? f.k->writes[f.index].landed
                                      : f.k->incs[f.index].landed;
    if (landed) return false;
    land(f);
    return true;
}

bool land_one_in_flight() {
    while (!g.in_flight.empty()) {
        if (land_front()) return true;
    }
    return false;
}

void perturb_point() {
    Kernel& k = *g.cur;
    ++g.tick;
    while (!g.in_flight.empty() && g.in_flight.front().due <= g.tick) land_front();
    if (next_random() % g.yield_one_in == 0) {
        // Preempted between two API calls: the kernel stays ready and the scheduler picks anew.
        swapcontext(&k.ctx, &g.sched_ctx);
        map_window_for(k);
    }
}

void wait_landed(int kind) {
    Kernel& k = cur();
    if (all_landed(k, kind)) return;
    // The barrier waits for its transactions; meanwhile other kernels run and time passes.
    k.wait.kind = WaitKind::Landed;
    k.wait.n = uint32_t(kind);
    k.state = Kernel::Blocked;
    swapcontext(&k.ctx, &g.sched_ctx);
    k.state = Kernel::Ready;
    k.wait.kind = WaitKind::None;
}

[[noreturn]] static void report_deadlock() {
    std::ostringstream s;
    s << "deadlock: every live kernel is blocked";
    fail_kind("deadlock", s.str());
}

static bool runnable(const Kernel& k) {
    return k.state != Kernel::Done && (k.state != Kernel::Blocked || wait_satisfied(k));
}

// Perturbed schedule: the next kernel is drawn at random among the runnable ones; when none is
// runnable, transfers and increments still in flight land (in random order) before a deadlock is declared.
static void run_all_perturbed(size_t live) {
    std::vector<Kernel*> ready;
    ready.reserve(g.kernels.size());
    while (live) {
        ready.clear();
        for (Kernel* k : g.kernels) {
            if (runnable(*k)) ready.push_back(k);
        }
        if (ready.empty()) {
            if (land_one_in_flight()) continue;
            report_deadlock();
        }
        Kernel& k = *ready[size_t(next_random() % ready.size())];
        run_kernel(k);
        g_progress.fetch_add(1, std::memory_order_relaxed);
        if (k.state == Kernel::Done) --live;
    }
}

void run_all() {
    size_t live = 0;
    for (Kernel* k : g.kernels) {
        start_fiber(*k);
        ++live;
    }
    if (g.perturb) {
        run_all_perturbed(live);
        return;
    }
    const size_t ncores = g.cores.size();
    size_t start = 0;
    while (live) {
        bool progressed = false;
        for (size_t i = 0; i < ncores; ++i) {
            Core& c = *g.cores[(start + i) % ncores];
            bool any = true;
            while (any) {  // run this core until all its kernels are blocked or done
                any = false;
                for (Kernel* k : c.k) {
                    if (!k || k->state == Kernel::Done) continue;
                    if (k->state == Kernel::Blocked && !wait_satisfied(*k)) continue;
                    run_kernel(*k);
                    g_progress.fetch_add(1, std::memory_order_relaxed);
                    any = progressed = true;
                    if (k->state == Kernel::Done) --live;
                }
            }
        }
        start = (start + 1) % (ncores ? ncores : 1);
        if (!progressed) report_deadlock();
    }
}

// ------------------------------------------------------------------ watchdog and crash handling

// The watchdog looks every 20 ms; stop_watchdog wakes it at once (a run does not wait out its sleep).
static std::mutex g_watchdog_mutex;
static std::condition_variable g_watchdog_wake;
static bool g_watchdog_stop = false;  // guarded by g_watchdog_mutex
static std::thread g_watchdog;

void start_watchdog() {
    g_watchdog = std::thread([] {
        uint64_t last = g_progress.load();
        auto since = std::chrono::steady_clock::now();
        std::unique_lock<std::mutex> lock(g_watchdog_mutex);
        while (!g_watchdog_stop) {
            if (g_watchdog_wake.wait_for(lock, std::chrono::milliseconds(20), [] { return g_watchdog_stop; })) break;
            const uint64_t now = g_progress.load();
            if (now != last) {
                last = now;
                since = std::chrono::steady_clock::now();
                continue;
            }
            const double idle = std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
            if (idle >= g.watchdog_seconds) {
                Kernel* k = g.cur;
                char secs[32];
                std::snprintf(secs, sizeof secs, "%.1f", idle);
                write_error_report("watchdog",
                                   std::string(k ? "the kernel" : "the runtime") + " made no API call for " + secs +
                                       " s (a loop that polls memory without an API call never ends here)",
                                   k);
                _exit(5);
            }
        }
    });
}

void stop_watchdog() {
    {
        std::lock_guard<std::mutex> lock(g_watchdog_mutex);
        g_watchdog_stop = true;
    }
    g_watchdog_wake.notify_all();
    if (g_watchdog.joinable()) g_watchdog.join();
}

static void crash_handler(int sig, siginfo_t* info, void*) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
    std::string msg = std::string("crash: ") + strsignal(sig);
    if (sig == SIGSEGV || sig == SIGBUS) {
        msg += " at address " + hex(addr);
        if (addr < kWindowBase) {
            msg += " (below L1 " + hex(kWindowBase) + ": null pointer or the reserved firmware region)";
        } else if (addr < kL1Size) {
            msg += " (L1 above the core's highest CB";
            if (g.cur) msg += ", which ends at " + hex(g.cur->core->top);
            msg += ": allocated to nothing in this program)";
        } else if (g.cur && addr >= uintptr_t(g.cur->stack) && addr < uintptr_t(g.cur->stack) + 4096) {
            msg += " (kernel stack overflow: the fiber stack is 1 MiB)";
        }
    }
    write_error_report("crash", msg, g.cur);
    _exit(4);
}

void install_crash_handlers() {
    static char altstack[1 << 16];
    stack_t ss{};
    ss.ss_sp = altstack;
    ss.ss_size = sizeof altstack;
    sigaltstack(&ss, nullptr);
    struct sigaction sa{};
    sa.sa_sigaction = crash_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
        sigaction(sig, &sa, nullptr);
    }
}

[[noreturn]] void fail_kind(const char* kind, const std::string& message) {
    write_error_report(kind, message, g.cur);
    _exit(std::strcmp(kind, "deadlock") == 0 ? 3 : 2);
}

[[noreturn]] void fail(const std::string& message) { fail_kind("kernel_error", message); }

[[noreturn]] void fail_for(const Kernel* k, const std::string& message) {
    write_error_report("kernel_error", message, k);
    _exit(2);
}

}  // namespace ttrt
