// Error reports, counters and DRAM images written at the end of a run.
#include "report.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "compute.hpp"

namespace ttrt {

static std::string json_str(const std::string& s) {
    std::string o = "\"";
    for (char ch : s) {
        switch (ch) {
            case '"': o += "\\\""; break;
            case '\\': o += "\\\\"; break;
            case '\n': o += "\\n"; break;
            case '\t': o += "\\t"; break;
            default:
                if ((unsigned char)ch < 0x20) {
                    char b[8];
                    std::snprintf(b, sizeof b, "\\u%04x", ch);
                    o += b;
                } else {
                    o += ch;
                }
        }
    }
    return o + "\"";
}

static std::string kernel_json(const Kernel& k) {
    std::string state;
    switch (k.state) {
        case Kernel::Done: state = "done"; break;
        case Kernel::Blocked: state = "blocked"; break;
        case Kernel::Ready: state = k.started && &k == g.cur ? "running" : "ready"; break;
    }
    const std::string call = call_text(k);
    std::string s = "{\"core\": [" + std::to_string(k.core->lx) + ", " + std::to_string(k.core->ly) + "]";
    s += ", \"kind\": " + json_str(kind_name(k.kind));
    s += ", \"name\": " + json_str(k.name);
    s += ", \"source\": " + json_str(k.source);
    s += ", \"state\": " + json_str(state);
    s += ", \"waiting_for\": " + json_str(k.state == Kernel::Blocked ? describe_wait(k) : std::string());
    s += ", \"last_call\": " + json_str(call) + "}";
    return s;
}

void write_error_report(const char* kind, const std::string& message, const Kernel* failing) {
    std::string s = "{\"kind\": " + json_str(kind) + ", \"message\": " + json_str(message);
    s += ", \"failing\": " + (failing ? kernel_json(*failing) : std::string("null"));
    s += ", \"kernels\": [";
    for (size_t i = 0; i < g.kernels.size(); ++i) {
        if (i) s += ", ";
        s += kernel_json(*g.kernels[i]);
    }
    s += "]}\n";
    const std::string path = g.out_dir + "/error.json";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        size_t off = 0;
        while (off < s.size()) {
            ssize_t n = ::write(fd, s.data() + off, s.size() - off);
            if (n <= 0) break;
            off += size_t(n);
        }
        ::close(fd);
    }
    // Also on stderr, for a human running the runner by hand.
    ssize_t unused = ::write(2, message.data(), message.size());
    unused = ::write(2, "\n", 1);
    (void)unused;
}

static void write_file(const std::string& path, const void* data, size_t size) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) fail_kind("internal", "cannot write " + path + ": " + std::strerror(errno));
    if (size && std::fwrite(data, 1, size, f) != size) fail_kind("internal", "short write to " + path);
    std::fclose(f);
}

void write_outputs() {
    // DRAM tensors: every output, and every input the program wrote into.
    for (Tensor& t : g.tensors) {
        if (!t.written && !t.in_path.empty()) continue;
        std::vector<uint8_t> img(size_t(t.page_size) * t.num_pages);
        for (uint32_t p = 0; p < t.num_pages; ++p) {
            const uint8_t* b = t.bank_data(int(p % kNumBanks));
            std::memcpy(img.data() + size_t(p) * t.page_size, b + size_t(p / kNumBanks) * t.aligned_page,
                        t.page_size);
        }
        write_file(t.out_path, img.data(), img.size());
    }
    // L1 tensor shards with an output file: each core's bytes after the run.
    for (const Core* c : g.cores) {
        for (const L1Shard& sh : c->shards) {
            if (!sh.out_path.empty()) write_file(sh.out_path, c->l1 + sh.addr, sh.size);
        }
    }
    // Counters, one line per fact.
    std::string s;
    char line[512];
    for (size_t ki = 0; ki < g.kernels.size(); ++ki) {
        const Kernel& k = *g.kernels[ki];
        const Counters& c = k.counters;
        std::snprintf(line, sizeof line, "kernel %zu %d %d %s\n", ki, k.core->index, k.slot, kind_name(k.kind));
        s += line;
        s += "dram_read " + std::to_string(ki);
        for (int b = 0; b < kNumBanks; ++b) s += " " + std::to_string(c.dram_read[b]);
        s += "\ndram_write " + std::to_string(ki);
        for (int b = 0; b < kNumBanks; ++b) s += " " + std::to_string(c.dram_write[b]);
        s += "\n";
        for (size_t p = 0; p < c.noc_write_to.size(); ++p) {
            if (c.noc_write_to[p] || c.noc_read_from[p] || c.sem_inc_to[p]) {
                std::snprintf(line, sizeof line, "peer %zu %zu %llu %llu %llu\n", ki, p,
                              (unsigned long long)c.noc_write_to[p], (unsigned long long)c.noc_read_from[p],
                              (unsigned long long)c.sem_inc_to[p]);
                s += line;
            }
        }
        for (size_t op = 0; op < c.op_tiles.size(); ++op) {
            if (c.op_tiles[op]) {
                std::snprintf(line, sizeof line, "op %zu %s %llu\n", ki, compute_op_name(int(op)),
                              (unsigned long long)c.op_tiles[op]);
                s += line;
            }
        }
        std::snprintf(line, sizeof line, "waits %zu %llu %llu %llu %llu\n", ki, (unsigned long long)c.cb_calls,
                      (unsigned long long)c.cb_blocked, (unsigned long long)c.sem_waits,
                      (unsigned long long)c.sem_blocked);
        s += line;
        std::snprintf(line, sizeof line, "events %zu %zu\n", ki, k.events.size());
        s += line;
    }
    write_file(g.out_dir + "/counters.txt", s.data(), s.size());
    // Events: for each kernel in order, its merged events (20 bytes each, see Event).
    std::string ev;
    for (const Kernel* k : g.kernels) {
        ev.append(reinterpret_cast<const char*>(k->events.data()), k->events.size() * sizeof(Event));
    }
    write_file(g.out_dir + "/events.bin", ev.data(), ev.size());
}

}  // namespace ttrt
