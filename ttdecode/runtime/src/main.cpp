// The runner executable: reads a program description written by ttdecode/runtime/driver.py, builds
// the modelled machine (L1 images, DRAM banks, CBs, semaphores), loads one private copy of every
// kernel library per core, runs all kernels and writes the outputs.
//
// Usage: ttrt_runner <program.txt>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "compute.hpp"
#include "engine.hpp"
#include "fast_unpack.hpp"
#include "report.hpp"

namespace ttrt {
void reserve_window();
void run_all();
void start_watchdog();
void stop_watchdog();
void install_crash_handlers();

// Program-file strings are percent-encoded so they hold no whitespace.
static std::string unescape(const std::string& s) {
    std::string o;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size()) {
            o += char(std::stoi(s.substr(i + 1, 2), nullptr, 16));
            i += 2;
        } else {
            o += s[i];
        }
    }
    return o == "-" ? std::string() : o;
}

static void read_whole(const std::string& path, std::vector<uint8_t>& out) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) fail_kind("internal", "cannot read " + path);
    std::fseek(f, 0, SEEK_END);
    out.resize(size_t(std::ftell(f)));
    std::fseek(f, 0, SEEK_SET);
    const size_t got = out.empty() ? 0 : std::fread(out.data(), 1, out.size(), f);
    std::fclose(f);
    if (got != out.size()) fail_kind("internal", "short read of " + path);
}

// A private copy of a kernel library: each dlopen of a distinct file gets its own globals.
static void* load_private_copy(const std::string& so_path, const std::vector<uint8_t>& bytes, const Kernel& k) {
    int fd = memfd_create("ttrt-kernel", MFD_CLOEXEC);
    if (fd < 0) fail_kind("internal", std::string("memfd_create: ") + std::strerror(errno));
    size_t off = 0;
    while (off < bytes.size()) {
        ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
        if (n <= 0) fail_kind("internal", "cannot copy " + so_path);
        off += size_t(n);
    }
    const std::string proc = "/proc/self/fd/" + std::to_string(fd);
    // The descriptor stays open: dlopen recognises an already loaded library by its path, so every copy
    // needs a distinct /proc/self/fd/N name for the life of the run.
    void* h = dlopen(proc.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) fail_kind("internal", "cannot load " + so_path + " for " + kernel_label(&k) + ": " + dlerror());
    return h;
}

template <typename T>
static T* sym(void* h, const char* name, const Kernel& k) {
    void* p = dlsym(h, name);
    if (!p) fail_kind("internal", std::string("kernel library of ") + kernel_label(&k) + " lacks symbol " + name);
    return static_cast<T*>(p);
}

static void load_kernel(Kernel& k, const std::vector<uint8_t>& bytes) {
    k.handle = load_private_copy(k.so_path, bytes, k);
    k.entry = reinterpret_cast<void (*)()>(dlsym(k.handle, "ttrt_kernel_entry"));
    if (!k.entry) fail_kind("internal", "kernel library of " + kernel_label(&k) + " has no entry point");
    Core& c = *k.core;
    *sym<uint32_t*>(k.handle, "rta_l1_base", k) = reinterpret_cast<uint32_t*>(uintptr_t(k.rta_addr));
    *sym<uint32_t*>(k.handle, "crta_l1_base", k) = reinterpret_cast<uint32_t*>(uintptr_t(k.crta_addr));
    uint32_t** sems = sym<uint32_t*>(k.handle, "sem_l1_base", k);
    sems[0] = reinterpret_cast<uint32_t*>(uintptr_t(c.sem_base));
    uint8_t* mx = sym<uint8_t>(k.handle, "my_x", k);
    uint8_t* my = sym<uint8_t>(k.handle, "my_y", k);
    mx[0] = mx[1] = uint8_t(c.nx);
    my[0] = my[1] = uint8_t(c.ny);
    *sym<uint8_t>(k.handle, "my_logical_x_", k) = uint8_t(c.lx);
    *sym<uint8_t>(k.handle, "my_logical_y_", k) = uint8_t(c.ly);
    *sym<uint32_t>(k.handle, "rta_count", k) = k.rta_count;
    *sym<uint32_t>(k.handle, "crta_count", k) = k.crta_count;
}

static void write_words(Core& c, uint32_t addr, const std::vector<uint32_t>& v) {
    if (!v.empty()) std::memcpy(c.l1 + addr, v.data(), v.size() * 4);
}

// Fill L1 bytes [from, to) of a core with poison through the memfd (pwrite) rather than the mapping:
// the pages are filled in the page cache without a fault per page, and only the pages a kernel
// touches are ever mapped. The bytes are the same as a memset through the mapping.
static void poison_l1(Core& c, uint32_t from, uint32_t to) {
    // One 64 KiB block of poison, written as often as needed by one pwritev (a syscall per block cost more).
    static std::vector<uint8_t> poison(64 * 1024, kPoison);
    static std::vector<iovec> iov;
    for (uint32_t a = from; a < to;) {
        iov.clear();
        size_t n = 0;
        while (a + n < to && iov.size() < 1024) {
            const size_t len = std::min<size_t>(poison.size(), to - a - n);
            iov.push_back(iovec{poison.data(), len});
            n += len;
        }
        const ssize_t w = pwritev(c.fd, iov.data(), int(iov.size()), off_t(a));
        if (w <= 0) fail_kind("internal", std::string("cannot poison an L1 image: ") + std::strerror(errno));
        a += uint32_t(w);
    }
}

// An input tensor's page-order image file into its banks (page p in bank p % 12): the file is mapped
// (its pages are in the page cache: the driver has just written it) and each page copied once.
static void read_tensor_image(Tensor& t) {
    const int fd = ::open(t.in_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_kind("internal", "cannot read " + t.in_path);
    struct stat st{};
    const size_t expect = size_t(t.page_size) * t.num_pages;
    if (fstat(fd, &st) != 0 || size_t(st.st_size) != expect) {
        ::close(fd);
        fail_kind("internal", t.in_path + ": " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(expect));
    }
    if (expect == 0) {
        ::close(fd);
        return;
    }
    void* m = mmap(nullptr, expect, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) fail_kind("internal", "cannot map " + t.in_path + ": " + std::strerror(errno));
    const uint8_t* src = static_cast<const uint8_t*>(m);
    for (uint32_t p = 0; p < t.num_pages; ++p) {
        std::memcpy(t.bank_data(int(p % kNumBanks)) + size_t(p / kNumBanks) * t.aligned_page,
                    src + size_t(p) * t.page_size, t.page_size);
    }
    munmap(m, expect);
}

// An input tensor's image file already in bank order (bank b at b * per_bank, as `Tensor::image`):
// mapped as the banks themselves, copy-on-write, so the file (shared by later runs) never changes and
// nothing is copied up front.
static void map_banked_image(Tensor& t) {
    const int fd = ::open(t.in_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_kind("internal", "cannot read " + t.in_path);
    struct stat st{};
    const size_t expect = size_t(t.per_bank) * kNumBanks;
    if (fstat(fd, &st) != 0 || size_t(st.st_size) != expect || expect == 0) {
        ::close(fd);
        fail_kind("internal", t.in_path + ": " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(expect) +
                                  " (the banks of tensor " + t.name + ")");
    }
    // Populated read-only (a writable private mapping would be populated by copying every page), then
    // made writable: a page the kernels write is copied then, and only that page.
    void* m = mmap(nullptr, expect, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED || mprotect(m, expect, PROT_READ | PROT_WRITE) != 0) {
        fail_kind("internal", "cannot map " + t.in_path + ": " + std::strerror(errno));
    }
    t.image = static_cast<uint8_t*>(m);
}

static void parse_program(const std::string& path) {
    std::ifstream f(path);
    if (!f) fail_kind("internal", "cannot open program file " + path);
    std::string line;
    std::map<std::string, std::vector<uint8_t>> libs;
    int ncores = 0;
    while (std::getline(f, line)) {
        std::istringstream in(line);
        std::string tag;
        in >> tag;
        if (tag.empty() || tag == "ttrt") continue;
        if (tag == "out_dir") {
            std::string p;
            in >> p;
            g.out_dir = unescape(p);
        } else if (tag == "watchdog") {
            in >> g.watchdog_seconds;
        } else if (tag == "perturb") {
            uint64_t seed;
            in >> seed;
            g.perturb = true;
            // splitmix64 of the seed: a nonzero xorshift state, neighbouring seeds far apart
            uint64_t z = seed + 0x9E3779B97F4A7C15ull;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            g.rng = (z ^ (z >> 31)) | 1;
            // Each seed also picks how often kernels are preempted and transfers land early, so a
            // few seeds cover both fine interleavings and long uninterrupted runs.
            static const uint32_t yield_choices[] = {1, 2, 4, 16};
            static const uint32_t delay_choices[] = {2, 8, 32, 256};
            g.yield_one_in = yield_choices[next_random() % 4];
            g.max_delay = delay_choices[next_random() % 4];
        } else if (tag == "bank") {
            int b;
            in >> b;
            in >> g.dram_bank_x[b] >> g.dram_bank_y[b] >> g.dram_bank_offset[b];
        } else if (tag == "tensor") {
            Tensor t;
            std::string name, inp, outp, order;
            in >> name >> t.base >> t.page_size >> t.aligned_page >> t.num_pages >> inp >> outp >> order;
            t.name = unescape(name);
            t.in_path = unescape(inp);
            t.out_path = unescape(outp);
            t.per_bank = t.aligned_page * ((t.num_pages + kNumBanks - 1) / kNumBanks);
            // An output starts as poison (0xFF: NaN in every float format), as uninitialised DRAM would;
            // an input's bytes outside its pages (alignment padding, a short last round) are 0. An input
            // given in bank order ("banked": the driver's shared images) is mapped as it is.
            if (order == "banked" && !t.in_path.empty()) {
                map_banked_image(t);
            } else {
                if (!order.empty()) fail_kind("internal", "program file: unknown tensor image order '" + order + "'");
                t.image = zeroed_pages(size_t(t.per_bank) * kNumBanks, "the DRAM image of tensor " + t.name);
                if (t.in_path.empty()) std::memset(t.image, 0xFF, size_t(t.per_bank) * kNumBanks);
                else read_tensor_image(t);
            }
            g.tensors.push_back(std::move(t));
        } else if (tag == "core") {
            Core* c = new Core();
            c->index = ncores++;
            in >> c->lx >> c->ly >> c->nx >> c->ny >> c->sem_base >> c->num_sems;
            c->fd = memfd_create("ttrt-l1", MFD_CLOEXEC);
            if (c->fd < 0 || ftruncate(c->fd, kL1Size) != 0) fail_kind("internal", "cannot create an L1 image");
            void* p = mmap(nullptr, kL1Size, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
            if (p == MAP_FAILED) fail_kind("internal", "cannot map an L1 image");
            c->l1 = static_cast<uint8_t*>(p);
            g.cores.push_back(c);
        } else if (tag == "cb") {
            int ci, cb, fmt;
            in >> ci >> cb;
            CbConfig& cfg = g.cores[ci]->cbcfg[cb];
            int rows;
            in >> cfg.addr >> cfg.page_size >> cfg.num_pages >> fmt >> rows;
            if (rows != 32 && rows != 16 && rows != 8) fail_kind("internal", "cb tile rows must be 32, 16 or 8");
            cfg.format = uint8_t(fmt);
            cfg.rows = uint8_t(rows);
            cfg.present = true;
        } else if (tag == "shard") {
            int ci;
            L1Shard sh;
            std::string inp, outp;
            in >> ci >> sh.addr >> sh.size >> inp >> outp;
            sh.in_path = unescape(inp);
            sh.out_path = unescape(outp);
            if (uint64_t(sh.addr) + sh.size > kL1Size || sh.addr < kUnreservedBase)
                fail_kind("internal", "program file: an L1 shard outside the core's free L1");
            g.cores[ci]->shards.push_back(std::move(sh));
        } else if (tag == "sem") {
            int ci, id;
            uint32_t init;
            in >> ci >> id >> init;
            g.cores[ci]->sem_init.push_back({uint32_t(id), init});
        } else if (tag == "kernel") {
            int ci, slot, kind;
            std::string so, name, src;
            Kernel* k = new Kernel();
            in >> ci >> slot >> kind >> so >> name >> src >> k->rta_addr >> k->crta_addr >> k->dst_tiles;
            int fp32, approx, full, fid;
            uint32_t u2d;
            in >> fp32 >> approx >> full >> fid >> u2d;
            k->core = g.cores[ci];
            k->slot = slot;
            k->kind = Kind(kind);
            k->so_path = unescape(so);
            k->name = unescape(name);
            k->source = unescape(src);
            k->fp32_acc = fp32;
            k->approx = approx;
            k->full_sync = full;
            k->fidelity = fid;
            k->unpack_to_dest = u2d;
            k->core->k[slot] = k;
            g.kernels.push_back(k);
            if (!libs.count(k->so_path)) read_whole(k->so_path, libs[k->so_path]);
        } else if (tag == "rta" || tag == "crta") {
            int ci, slot;
            size_t n;
            in >> ci >> slot >> n;
            std::vector<uint32_t> v(n);
            for (auto& x : v) in >> x;
            Kernel* k = g.cores[ci]->k[slot];
            if (tag == "rta") {
                k->rta_count = uint32_t(n);
                k->rta_init = std::move(v);
            } else {
                k->crta_count = uint32_t(n);
                k->crta_init = std::move(v);
            }
        } else if (tag == "end") {
            break;
        } else {
            fail_kind("internal", "program file: unknown line '" + line + "'");
        }
    }
    // L1 at program start. The firmware clears nothing a kernel can see: CBs hold whatever the last
    // program left there. So everything up to the core's highest CB is poisoned, then the host's
    // writes follow: semaphore initial values and runtime args. L1 above the highest CB is allocated
    // to nothing and not mapped in the window (touching it crashes with a clear error).
    for (Core* c : g.cores) {
        uint32_t top = kUnreservedBase;
        for (const CbConfig& cfg : c->cbcfg) {
            if (cfg.present) top = std::max(top, cb_limit(cfg));
        }
        c->top = std::min<uint32_t>(kL1Size, (top + 4095u) & ~4095u);
        poison_l1(*c, kWindowBase, c->top);
        for (const auto& [id, init] : c->sem_init) std::memcpy(c->l1 + c->sem_base + 16u * id, &init, 4);
        // L1 shards: an input's bytes, an output's poison (what the allocator's L1 held before).
        for (const L1Shard& sh : c->shards) {
            if (sh.in_path.empty()) {
                std::memset(c->l1 + sh.addr, kPoison, sh.size);
                continue;
            }
            std::vector<uint8_t> bytes;
            read_whole(sh.in_path, bytes);
            if (bytes.size() != sh.size) fail_kind("internal", "L1 shard image " + sh.in_path + ": wrong size");
            std::memcpy(c->l1 + sh.addr, bytes.data(), sh.size);
        }
    }
    for (Kernel* k : g.kernels) {
        write_words(*k->core, k->rta_addr, k->rta_init);
        write_words(*k->core, k->crta_addr, k->crta_init);
    }
    for (Kernel* k : g.kernels) {
        for (int cb = 0; cb < kNumCbs; ++cb) {
            const CbConfig& cfg = k->core->cbcfg[cb];
            k->cb[cb].rd = k->cb[cb].wr = cfg.addr;
            k->core->cbc[cb].front = cfg.addr;
        }
        k->counters.noc_write_to.assign(g.cores.size(), 0);
        k->counters.noc_read_from.assign(g.cores.size(), 0);
        k->counters.sem_inc_to.assign(g.cores.size(), 0);
        k->counters.op_tiles.assign(kNumComputeOps, 0);
        if (k->kind == Kind::Compute) k->cs = new_compute_state(*k);
        load_kernel(*k, libs[k->so_path]);
    }
}

}  // namespace ttrt

// Checks fast_unpack_tile against ttdecode::formats::unpack_tile on pseudo-random tiles of every
// format (specials included); prints the number of mismatching tiles.
static int self_test() {
    namespace f = ttdecode::formats;
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    auto next = [&] { seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17; return seed; };
    int bad = 0;
    for (int t = 0; t < 2000; ++t) {
        for (f::DataFormat fmt : {f::DataFormat::Float32, f::DataFormat::Float16_b, f::DataFormat::Bfp8_b,
                                  f::DataFormat::Bfp4_b}) {
            uint8_t img[4096];
            for (auto& b : img) b = uint8_t(next());
            float want[1024], got[1024];
            f::unpack_tile(fmt, img, want);
            ttrt::fast_unpack_tile(fmt, img, got);
            bad += std::memcmp(want, got, sizeof want) != 0;
        }
    }
    std::printf("fast_unpack mismatches: %d\n", bad);
    return bad ? 1 : 0;
}

int main(int argc, char** argv) {
    using namespace ttrt;
    if (argc == 2 && std::strcmp(argv[1], "--self-test") == 0) return self_test();
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s <program.txt>\n", argv[0]);
        return 1;
    }
    g.out_dir = ".";
    install_crash_handlers();
    reserve_window();
    parse_program(argv[1]);
    start_watchdog();
    run_all();
    stop_watchdog();
    write_outputs();
    return 0;
}
