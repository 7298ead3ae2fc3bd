// A stand-in for the SFPI toolchain's `sfpi.h`, written for ttdecode's mock Wormhole
// (ttdecode/testing/mock.py) from the public SFPI language documentation (tenstorrent/sfpi).
//
// It declares the SFPI vector language -- types, registers, the predication macros, the
// intrinsic functions and the instruction-modifier constants -- with the right shapes and NO
// semantics: every operation is an inline function that returns a default value. It exists so
// that clang can type-check and generate LLVM IR for compute kernels against the wheel's real
// compute API and LLK headers. It cannot say anything about SFPU code generation, register
// allocation, instruction legality or code size: only the SFPI compiler can.
//
// Conversions are one-way (constructors on the target type) so overloads stay unambiguous:
// integer vectors convert among themselves, float vectors among themselves, and crossing
// between them takes `as<T>` (bit reinterpretation) or `convert<T>` (value conversion).

#pragma once

#include "sfpi_constants.h"

// Functions the SFPI compiler must inline (the SFPU has no call stack).
#define sfpi_inline inline __attribute__((always_inline))

// The vector value the SFPU builtins take and return (`vFloat::get()` and friends).
struct __rvtt_vec_t {
    unsigned int bits;
};

namespace sfpi {

template <bool C, class T = void>
struct __sfpi_enable {};
template <class T>
struct __sfpi_enable<true, T> {
    using type = T;
};
template <bool C, class A, class B>
struct __sfpi_pick {
    using type = A;
};
template <class A, class B>
struct __sfpi_pick<false, A, B> {
    using type = B;
};
struct vFloatBase_tag {};

// ---- enumerations ---------------------------------------------------------------------------

enum class LRegs : unsigned { LReg0 = 0, LReg1, LReg2, LReg3, LReg4, LReg5, LReg6, LReg7, LRegCount };
enum class RoundMode : unsigned { Nearest = 0, NearestStochastic = 1 };
enum class DataLayout : unsigned { Default = 0, F32, FSrcB, I32, SM32, U16, U32, TILE, ROW_MAJOR };
enum class ExponentMode : unsigned { Debiased = 0, Biased = 1 };
enum class MantissaMode : unsigned { NoImplicitOne = 0, ImplicitOne = 1 };
enum class ShiftMode : unsigned { Arithmetic = 0, Logical = 1 };
enum class LutSign : unsigned { Retain = 0, Update = 1 };

// Rows of DST one SFPU load/store covers (a 32x32 tile is 64 / SFP_DESTREG_STRIDE SFPU rows).
constexpr unsigned SFP_DESTREG_STRIDE = 2;

// ---- scalar immediates --------------------------------------------------------------------

// A float immediate loaded as fp16b / fp16a (SFPLOADI with the FLOATB / FLOATA modifier).
struct sFloat16b {
    constexpr sFloat16b(float f) : value(f) {}
    float value;
};
struct sFloat16a {
    constexpr sFloat16a(float f) : value(f) {}
    float value;
};

class vDReg;
class vLReg;
class vConstFloat;
class vConstInt;
template <DataLayout L>
class vDRegMode;

// ---- conditions -----------------------------------------------------------------------------

// The result of a vector comparison: a per-lane condition for v_if / v_elseif / v_and.
class vCond {
public:
    vCond() = default;
    vCond operator!() const { return vCond(); }
    vCond operator&&(const vCond&) const { return vCond(); }
    vCond operator||(const vCond&) const { return vCond(); }
};

class vBool {
public:
    vBool() = default;
    vBool(const vCond&) {}
    vBool operator!() const { return vBool(); }
    vBool operator&&(const vBool&) const { return vBool(); }
    vBool operator||(const vBool&) const { return vBool(); }
    operator vCond() const { return vCond(); }
};

// ---- vector base ------------------------------------------------------------------------------

class vBase {
public:
    __rvtt_vec_t get() const { return v; }

protected:
    __rvtt_vec_t v{0};
};

// ---- integer vectors ------------------------------------------------------------------------

class vIntBase : public vBase {
public:
    vIntBase() = default;
    explicit vIntBase(__rvtt_vec_t t) { v = t; }
};

template <class T>
struct is_int_vec {
    static constexpr bool value = __is_base_of(vIntBase, T);
};

#define SFPI_STANDIN_INT_VECTOR(NAME)                                                     \
    class NAME : public vIntBase {                                                         \
    public:                                                                                \
        NAME() = default;                                                                  \
        NAME(int) {}                                                                       \
        NAME(unsigned int) {}                                                              \
        NAME(long) {}                                                                      \
        NAME(unsigned long) {}                                                             \
        NAME(__rvtt_vec_t t) { v = t; }                                                    \
        NAME(const vDReg&);                                                                \
        NAME(const vLReg&);                                                                \
        NAME(const vConstInt&);                                                            \
        template <DataLayout L>                                                            \
        NAME(const vDRegMode<L>&) {}                                                       \
        template <class O, class = typename __sfpi_enable<__is_base_of(vIntBase, O)>::type> \
        NAME(const O& o) { v = o.get(); }                                                  \
        NAME& operator+=(const NAME&) { return *this; }                                    \
        NAME& operator-=(const NAME&) { return *this; }                                    \
        NAME& operator&=(const NAME&) { return *this; }                                    \
        NAME& operator|=(const NAME&) { return *this; }                                    \
        NAME& operator^=(const NAME&) { return *this; }                                    \
        NAME& operator<<=(unsigned) { return *this; }                                      \
        NAME& operator>>=(unsigned) { return *this; }                                      \
        NAME& operator++() { return *this; }                                               \
        NAME operator++(int) { return *this; }                                             \
        NAME& operator--() { return *this; }                                               \
        NAME operator--(int) { return *this; }                                             \
        NAME operator~() const { return *this; }                                           \
        NAME operator-() const { return *this; }                                           \
        NAME operator<<(unsigned) const { return *this; }                                  \
        NAME operator>>(unsigned) const { return *this; }                                  \
        NAME operator<<(const vIntBase&) const { return *this; }                           \
        NAME operator>>(const vIntBase&) const { return *this; }                           \
    };

SFPI_STANDIN_INT_VECTOR(vInt)
SFPI_STANDIN_INT_VECTOR(vUInt)
SFPI_STANDIN_INT_VECTOR(vMag)    // unsigned magnitude (exman's result)
SFPI_STANDIN_INT_VECTOR(vSMag)   // sign-magnitude 32 bit
SFPI_STANDIN_INT_VECTOR(vSMag16)
SFPI_STANDIN_INT_VECTOR(vSMag8)
SFPI_STANDIN_INT_VECTOR(vUInt16)
SFPI_STANDIN_INT_VECTOR(vUInt8)
#undef SFPI_STANDIN_INT_VECTOR

// LUT coefficient vectors: a pair of packed fp16 (16ss / 16ii) or fp8 (8si) coefficients per
// lane, built from two float immediates or read back from a local register.
#define SFPI_STANDIN_LUT_VECTOR(NAME)             \
    class NAME : public vUInt {                   \
    public:                                       \
        NAME() = default;                         \
        NAME(float, float) {}                     \
        NAME(const vLReg& r) : vUInt(r) {}        \
    };
SFPI_STANDIN_LUT_VECTOR(vLut16ss)
SFPI_STANDIN_LUT_VECTOR(vLut16ii)
SFPI_STANDIN_LUT_VECTOR(vLut8si)
#undef SFPI_STANDIN_LUT_VECTOR

// Binary integer operators: integer vector op integer vector / int, result in the left type
// (the right type when the left is a plain int).
class vConstInt;
template <class T>
struct __sfpi_intlike {
    static constexpr bool value = __is_base_of(vIntBase, T) || __is_same(T, vConstInt);
};
template <class A, class B>
struct __sfpi_int_result {
    using type = typename __sfpi_pick<__is_base_of(vIntBase, A), A,
                                      typename __sfpi_pick<__is_base_of(vIntBase, B), B, vInt>::type>::type;
};

#define SFPI_STANDIN_INT_BINOP(OP)                                                                 \
    template <class A, class B,                                                                    \
              class = typename __sfpi_enable<(__sfpi_intlike<A>::value || __sfpi_intlike<B>::value) && \
                                             !__is_base_of(vFloatBase_tag, A) && !__is_base_of(vFloatBase_tag, B)>::type> \
    inline typename __sfpi_int_result<A, B>::type operator OP(const A&, const B&) {                \
        return typename __sfpi_int_result<A, B>::type();                                           \
    }

#define SFPI_STANDIN_INT_CMP(OP)                                                                   \
    template <class A, class B,                                                                    \
              class = typename __sfpi_enable<(__sfpi_intlike<A>::value || __sfpi_intlike<B>::value) && \
                                             !__is_base_of(vFloatBase_tag, A) && !__is_base_of(vFloatBase_tag, B)>::type> \
    inline vCond operator OP(const A&, const B&) {                                                 \
        return vCond();                                                                            \
    }


SFPI_STANDIN_INT_BINOP(+)
SFPI_STANDIN_INT_BINOP(-)
SFPI_STANDIN_INT_BINOP(&)
SFPI_STANDIN_INT_BINOP(|)
SFPI_STANDIN_INT_BINOP(^)
SFPI_STANDIN_INT_BINOP(*)
SFPI_STANDIN_INT_CMP(<)
SFPI_STANDIN_INT_CMP(<=)
SFPI_STANDIN_INT_CMP(>)
SFPI_STANDIN_INT_CMP(>=)
SFPI_STANDIN_INT_CMP(==)
SFPI_STANDIN_INT_CMP(!=)
#undef SFPI_STANDIN_INT_BINOP
#undef SFPI_STANDIN_INT_CMP

// ---- float vectors --------------------------------------------------------------------------

class vFloat16b;
class vFloat16a;

class vFloat : public vBase, public vFloatBase_tag {
public:
    vFloat() = default;
    vFloat(float) {}
    vFloat(double) {}
    vFloat(int) {}
    vFloat(unsigned int) {}
    vFloat(sFloat16b) {}
    vFloat(sFloat16a) {}
    vFloat(__rvtt_vec_t t) { v = t; }
    vFloat(const vDReg&);
    vFloat(const vLReg&);
    vFloat(const vConstFloat&);
    vFloat(const vFloat16b&);
    vFloat(const vFloat16a&);
    template <DataLayout L>
    vFloat(const vDRegMode<L>&) {}
    vFloat& operator+=(const vFloat&) { return *this; }
    vFloat& operator-=(const vFloat&) { return *this; }
    vFloat& operator*=(const vFloat&) { return *this; }
    vFloat operator-() const { return *this; }
};

class vFloat16b : public vBase, public vFloatBase_tag {
public:
    vFloat16b() = default;
    vFloat16b(float) {}
    vFloat16b(__rvtt_vec_t t) { v = t; }
};
class vFloat16a : public vBase, public vFloatBase_tag {
public:
    vFloat16a() = default;
    vFloat16a(float) {}
    vFloat16a(__rvtt_vec_t t) { v = t; }
};

inline vFloat::vFloat(const vFloat16b& o) { v = o.get(); }
inline vFloat::vFloat(const vFloat16a& o) { v = o.get(); }

// ---- registers ------------------------------------------------------------------------------

// A DST row reached through dst_reg[i]: loads as float (or, through mode<L>(), as layout L).
class vDReg {
public:
    vDReg& operator=(const vFloat&) { return *this; }
    vDReg& operator=(const vIntBase&) { return *this; }
    vDReg& operator=(const vDReg&) { return *this; }
    vDReg& operator=(float) { return *this; }
    vDReg& operator=(const vFloat16b&) { return *this; }
    vDReg& operator+=(const vFloat&) { return *this; }
    vDReg& operator-=(const vFloat&) { return *this; }
    vDReg& operator*=(const vFloat&) { return *this; }
    // mode<L>() reads / writes the row as layout L; mode(addr_mod) stores with an address modifier.
    template <DataLayout L>
    vDRegMode<L> mode() const;
    template <DataLayout L>
    vDRegMode<L> mode(unsigned addr_mod) const;
    vDRegMode<DataLayout::Default> mode(unsigned addr_mod) const;
    vFloat operator-() const { return vFloat(); }
};

template <DataLayout L>
class vDRegMode {
public:
    vDRegMode& operator=(const vFloat&) { return *this; }
    vDRegMode& operator=(const vIntBase&) { return *this; }
    vDRegMode& operator=(float) { return *this; }
    vDRegMode& operator=(int) { return *this; }
};

template <DataLayout L>
inline vDRegMode<L> vDReg::mode() const {
    return vDRegMode<L>();
}
template <DataLayout L>
inline vDRegMode<L> vDReg::mode(unsigned) const {
    return vDRegMode<L>();
}
inline vDRegMode<DataLayout::Default> vDReg::mode(unsigned) const { return vDRegMode<DataLayout::Default>(); }

class vDRegFile {
public:
    vDReg operator[](int) const { return vDReg(); }
    // dst_reg++ / dst_reg += n advance the SFPU's DST row pointer.
    void operator++(int) const {}
    void operator++() const {}
    void operator+=(int) const {}
};

// An SFPU local register reached through l_reg[LRegs::LRegN].
class vLReg {
public:
    vLReg& operator=(const vFloat&) { return *this; }
    vLReg& operator=(const vIntBase&) { return *this; }
    // Tells the compiler the register holds a live value (set outside the compiler's view).
    void in_use() const {}
};

class vLRegFile {
public:
    vLReg operator[](LRegs) const { return vLReg(); }
};

// Constant registers: fixed (vConst0 ...) or programmable (vConstFloatPrgm0 = 1.5f).
class vConstFloat {
public:
    explicit constexpr vConstFloat(unsigned idx) : index(idx) {}
    void operator=(const vFloat&) const {}
    void operator=(float) const {}
    vFloat operator-() const { return vFloat(); }
    unsigned index;
};
class vConstInt {
public:
    explicit constexpr vConstInt(unsigned idx) : index(idx) {}
    void operator=(const vIntBase&) const {}
    void operator=(int) const {}
    unsigned index;
};

inline vFloat::vFloat(const vDReg&) {}
inline vFloat::vFloat(const vLReg&) {}
inline vFloat::vFloat(const vConstFloat&) {}
#define SFPI_STANDIN_INT_CTORS(NAME)                    \
    inline NAME::NAME(const vDReg&) {}                  \
    inline NAME::NAME(const vLReg&) {}                  \
    inline NAME::NAME(const vConstInt&) {}
SFPI_STANDIN_INT_CTORS(vInt)
SFPI_STANDIN_INT_CTORS(vUInt)
SFPI_STANDIN_INT_CTORS(vMag)
SFPI_STANDIN_INT_CTORS(vSMag)
SFPI_STANDIN_INT_CTORS(vSMag16)
SFPI_STANDIN_INT_CTORS(vSMag8)
SFPI_STANDIN_INT_CTORS(vUInt16)
SFPI_STANDIN_INT_CTORS(vUInt8)
#undef SFPI_STANDIN_INT_CTORS

constexpr vDRegFile dst_reg{};
constexpr vLRegFile l_reg{};

constexpr vConstFloat vConst0{0};
constexpr vConstFloat vConst1{1};
constexpr vConstFloat vConstNeg1{2};
constexpr vConstFloat vConst0p8373{3};
constexpr vConstFloat vConstNeg0p6729{4};
constexpr vConstFloat vConstFloatPrgm0{11};
constexpr vConstFloat vConstFloatPrgm1{12};
constexpr vConstFloat vConstFloatPrgm2{13};
constexpr vConstInt vConstIntPrgm0{11};
constexpr vConstInt vConstIntPrgm1{12};
constexpr vConstInt vConstIntPrgm2{13};
constexpr vConstInt vConstTileId{15};

// Keeps the compiler from spilling across a hand-scheduled region (a scope guard).
class lreg_pressure {
public:
    lreg_pressure() {}
};

// ---- float operators ------------------------------------------------------------------------

#define SFPI_STANDIN_FLOAT_BINOP(OP)                                                 \
    inline vFloat operator OP(const vFloat&, const vFloat&) { return vFloat(); }     \
    inline vFloat operator OP(const vDReg&, const vFloat&) { return vFloat(); }      \
    inline vFloat operator OP(const vFloat&, const vDReg&) { return vFloat(); }      \
    inline vFloat operator OP(const vDReg&, const vDReg&) { return vFloat(); }       \
    inline vFloat operator OP(const vDReg&, float) { return vFloat(); }              \
    inline vFloat operator OP(float, const vDReg&) { return vFloat(); }              \
    inline vFloat operator OP(const vConstFloat&, const vFloat&) { return vFloat(); } \
    inline vFloat operator OP(const vFloat&, const vConstFloat&) { return vFloat(); }
SFPI_STANDIN_FLOAT_BINOP(+)
SFPI_STANDIN_FLOAT_BINOP(-)
SFPI_STANDIN_FLOAT_BINOP(*)
#undef SFPI_STANDIN_FLOAT_BINOP

#define SFPI_STANDIN_FLOAT_CMP(OP)                                                  \
    inline vCond operator OP(const vFloat&, const vFloat&) { return vCond(); }      \
    inline vCond operator OP(const vDReg&, const vFloat&) { return vCond(); }       \
    inline vCond operator OP(const vFloat&, const vDReg&) { return vCond(); }       \
    inline vCond operator OP(const vDReg&, float) { return vCond(); }               \
    inline vCond operator OP(const vConstFloat&, const vFloat&) { return vCond(); } \
    inline vCond operator OP(const vFloat&, const vConstFloat&) { return vCond(); }
SFPI_STANDIN_FLOAT_CMP(<)
SFPI_STANDIN_FLOAT_CMP(<=)
SFPI_STANDIN_FLOAT_CMP(>)
SFPI_STANDIN_FLOAT_CMP(>=)
SFPI_STANDIN_FLOAT_CMP(==)
SFPI_STANDIN_FLOAT_CMP(!=)
#undef SFPI_STANDIN_FLOAT_CMP

// ---- predication ------------------------------------------------------------------------------

// The condition-code stack one v_if ... v_endif (or v_block ... v_endblock) scope manages.
class __vCCCtrl {
public:
    __vCCCtrl() {}
    void cc_if(const vCond&) const {}
    void cc_if(const vBool&) const {}
    void cc_elseif(const vCond&) const {}
    void cc_elseif(const vBool&) const {}
    void cc_else() const {}
    void cc_and(const vCond&) const {}
    void cc_and(const vBool&) const {}
};

// Lanes near a threshold (a hint for the compiler's condition handling); the condition itself.
inline vCond nearby(const vCond& c) { return c; }

// ---- intrinsic functions ----------------------------------------------------------------------

template <class T>
struct __sfpi_is_vec {
    static constexpr bool value = __is_base_of(vBase, T) || __is_same(T, vDReg) || __is_same(T, vLReg) ||
                                  __is_same(T, vConstFloat) || __is_same(T, vConstInt);
};

// Bit reinterpretation between vector types (no instruction).
template <class T, class S, class = typename __sfpi_enable<__is_base_of(vBase, T) && __sfpi_is_vec<S>::value>::type>
inline T as(const S&) {
    return T(__rvtt_vec_t{0});
}
template <class T, class S, class = typename __sfpi_enable<__is_base_of(vBase, T) && __sfpi_is_vec<S>::value>::type>
inline T reinterpret(const S&) {
    return T(__rvtt_vec_t{0});
}

// Value conversion between vector types (int <-> float, float -> fp16b with rounding).
template <class T, class S, class = typename __sfpi_enable<__is_base_of(vBase, T) && __sfpi_is_vec<S>::value>::type>
inline T convert(const S&, RoundMode = RoundMode::Nearest) {
    return T(__rvtt_vec_t{0});
}

inline vFloat abs(const vFloat&) { return vFloat(); }
inline vInt abs(const vInt&) { return vInt(); }
inline vFloat copysgn(const vFloat&, const vFloat&) { return vFloat(); }
inline vFloat setsgn(const vFloat&, int) { return vFloat(); }
inline vFloat setsgn(const vFloat&, const vFloat&) { return vFloat(); }
inline vFloat setsgn(const vFloat&, const vInt&) { return vFloat(); }
inline vFloat setsgn2(const vFloat&, const vInt&) { return vFloat(); }
inline vInt exexp(const vFloat&, ExponentMode = ExponentMode::Debiased) { return vInt(); }
inline vInt exexp_nodebias(const vFloat&) { return vInt(); }
inline vMag exman(const vFloat&, MantissaMode = MantissaMode::NoImplicitOne) { return vMag(); }
inline vInt exman8(const vFloat&) { return vInt(); }
inline vInt exman9(const vFloat&) { return vInt(); }
inline vFloat setexp(const vFloat&, unsigned) { return vFloat(); }
inline vFloat setexp(const vFloat&, const vIntBase&) { return vFloat(); }
inline vFloat setman(const vFloat&, unsigned) { return vFloat(); }
inline vFloat setman(const vFloat&, const vIntBase&) { return vFloat(); }
inline vFloat copyman(const vFloat&, const vFloat&) { return vFloat(); }
inline vFloat addexp(const vFloat&, int) { return vFloat(); }
inline vInt lz(const vIntBase&) { return vInt(); }
inline vInt lz(const vFloat&) { return vInt(); }
template <class V, class = typename __sfpi_enable<__is_base_of(vIntBase, V)>::type>
inline V shft(const V& v, int, ShiftMode = ShiftMode::Arithmetic) { return v; }
template <class V, class = typename __sfpi_enable<__is_base_of(vIntBase, V)>::type>
inline V shft(const V& v, const vIntBase&, ShiftMode = ShiftMode::Arithmetic) { return v; }

inline vFloat min(const vFloat&, const vFloat&) { return vFloat(); }
inline vFloat max(const vFloat&, const vFloat&) { return vFloat(); }
inline vInt min(const vInt&, const vInt&) { return vInt(); }
inline vInt max(const vInt&, const vInt&) { return vInt(); }
template <class V>
struct __sfpi_pair {
    V first;
    V second;
};
inline __sfpi_pair<vFloat> min_max(const vFloat&, const vFloat&) { return {vFloat(), vFloat()}; }
inline __sfpi_pair<vInt> min_max(const vInt&, const vInt&) { return {vInt(), vInt()}; }
inline vFloat clamp(const vFloat&, const vFloat&, const vFloat&) { return vFloat(); }
inline vFloat symmetric_clamp(const vFloat&, const vFloat&) { return vFloat(); }
inline vFloat approx_recip(const vFloat&) { return vFloat(); }

inline vCond is_inf(const vFloat&) { return vCond(); }
inline vCond is_nan(const vFloat&) { return vCond(); }
inline vCond is_finite(const vFloat&) { return vCond(); }
inline vCond is_pos(const vFloat&) { return vCond(); }
inline vCond is_neg(const vFloat&) { return vCond(); }

// Piecewise-linear lookup: lut(x, l0, l1, l2[, offset]) and the 6-entry form
// lut(x, s01, i01, s23, i23, s45, i45, LutSign).
inline vFloat lut(const vFloat&, const vUInt&, const vUInt&, const vUInt&, int = 0) { return vFloat(); }
inline vFloat lut_sign(const vFloat&, const vUInt&, const vUInt&, const vUInt&, int = 0) { return vFloat(); }
inline vFloat lut(const vFloat&, const vUInt&, const vUInt&, const vUInt&, const vUInt&, const vUInt&,
                  const vUInt&, LutSign = LutSign::Retain) {
    return vFloat();
}
inline vFloat lut2(const vFloat&, const vUInt&, const vUInt&, const vUInt&, int = 0) { return vFloat(); }
inline vFloat lut2_sign(const vFloat&, const vUInt&, const vUInt&, const vUInt&, int = 0) { return vFloat(); }

// Older conversion intrinsics.
inline vInt float_to_int16(const vFloat&, unsigned = 0) { return vInt(); }
inline vUInt float_to_uint16(const vFloat&, unsigned = 0) { return vUInt(); }
inline vInt float_to_int8(const vFloat&, unsigned = 0) { return vInt(); }
inline vUInt float_to_uint8(const vFloat&, unsigned = 0) { return vUInt(); }
inline vFloat float_to_fp16a(const vFloat&, unsigned = 0) { return vFloat(); }
inline vFloat float_to_fp16b(const vFloat&, unsigned = 0) { return vFloat(); }
inline vFloat int32_to_float(const vIntBase&, unsigned = 0) { return vFloat(); }
inline vUInt int32_to_uint8(const vIntBase&, unsigned = 0) { return vUInt(); }

// The builtins the SFPI language lowers to; the LLK calls one of them directly.
inline __rvtt_vec_t __standin_sfpmad(__rvtt_vec_t a, __rvtt_vec_t, __rvtt_vec_t, unsigned) { return a; }

}  // namespace sfpi

#define __builtin_rvtt_sfpmad(a, b, c, mod) ::sfpi::__standin_sfpmad((a), (b), (c), (mod))

// Predicated execution: v_if (cond) { ... } v_elseif (cond) { ... } v_else { ... } v_endif;
// and v_block { v_and (cond); ... } v_endblock;
#define v_if(x)                     \
    {                               \
        ::sfpi::__vCCCtrl __cc;     \
        __cc.cc_if(x);
#define v_elseif(x) __cc.cc_elseif(x);
#define v_else __cc.cc_else();
#define v_endif }
#define v_block                     \
    {                               \
        ::sfpi::__vCCCtrl __cc;
#define v_and(x) __cc.cc_and(x)
#define v_endblock }
