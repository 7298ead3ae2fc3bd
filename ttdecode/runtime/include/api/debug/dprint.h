// DPRINT for the ttdecode host runtime: `DPRINT << "x=" << x << ENDL();` prints one line on stderr,
// prefixed with the core and kernel (run_program forwards it). Numbers, strings and chars only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>

extern "C" void ttrt_dprint(const char* line);

struct ENDL {};
struct SETPRECISION {
    explicit SETPRECISION(int p) : precision(p) {}
    int precision;
};

class TtrtDprint {
public:
    TtrtDprint& operator<<(const char* s) { return append("%s", s); }
    TtrtDprint& operator<<(char c) { return append("%c", c); }
    TtrtDprint& operator<<(float v) { return append("%.*g", precision_, double(v)); }
    TtrtDprint& operator<<(double v) { return append("%.*g", precision_, v); }
    TtrtDprint& operator<<(int32_t v) { return append("%d", v); }
    TtrtDprint& operator<<(uint32_t v) { return append("%u", v); }
    TtrtDprint& operator<<(int64_t v) { return append("%lld", (long long)v); }
    TtrtDprint& operator<<(uint64_t v) { return append("%llu", (unsigned long long)v); }
    TtrtDprint& operator<<(uint8_t v) { return append("%u", unsigned(v)); }
    TtrtDprint& operator<<(uint16_t v) { return append("%u", unsigned(v)); }
    TtrtDprint& operator<<(SETPRECISION p) {
        precision_ = p.precision;
        return *this;
    }
    TtrtDprint& operator<<(ENDL) {
        ttrt_dprint(buf_);
        len_ = 0;
        buf_[0] = 0;
        return *this;
    }

private:
    template <typename... A>
    TtrtDprint& append(const char* fmt, A... a) {
        if (len_ < sizeof buf_ - 1) {
            const int n = std::snprintf(buf_ + len_, sizeof buf_ - len_, fmt, a...);
            if (n > 0) len_ = len_ + size_t(n) < sizeof buf_ ? len_ + size_t(n) : sizeof buf_ - 1;
        }
        return *this;
    }
    char buf_[512] = "";
    size_t len_ = 0;
    int precision_ = 6;
};

inline TtrtDprint ttrt_dprint_stream;
#define DPRINT ttrt_dprint_stream
#define DPRINT_MATH(x) x
#define DPRINT_PACK(x) x
#define DPRINT_UNPACK(x) x
#define DPRINT_DATA0(x) x
#define DPRINT_DATA1(x) x
