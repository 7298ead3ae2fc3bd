// Instruction-modifier constants of the SFPU instructions (the `instr_mod` fields), as the
// SFPI stand-in of ttdecode's mock Wormhole declares them: at global scope (the LLK's TTI_* macro
// calls name them unqualified) and in namespace sfpi (the LLK's sfpi code names them qualified).
// The values are placeholders that fit the fields: the stand-in generates no SFPU code.
#pragma once

namespace sfpi_standin_constants {
constexpr unsigned SFPABS_MOD1_FLOAT = 0;
constexpr unsigned SFPABS_MOD1_INT = 1;
constexpr unsigned SFPCAST_MOD1_INT32_TO_FP32_RNE = 2;
constexpr unsigned SFPCAST_MOD1_SM32_TO_FP32_RNE = 3;
constexpr unsigned SFPENCC_IMM12_BOTH = 4;
constexpr unsigned SFPENCC_IMM12_NONE = 5;
constexpr unsigned SFPENCC_MOD1_EI_RI = 6;
constexpr unsigned SFPENCC_MOD1_EU_R1 = 7;
constexpr unsigned SFPEXEXP_MOD1_DEBIAS = 0;
constexpr unsigned SFPEXEXP_MOD1_NODEBIAS = 1;
constexpr unsigned SFPEXEXP_MOD1_SET_CC_COMP_EXP = 2;
constexpr unsigned SFPEXEXP_MOD1_SET_CC_SGN_EXP = 3;
constexpr unsigned SFPEXMAN_MOD1_PAD8 = 4;
constexpr unsigned SFPEXMAN_MOD1_PAD9 = 5;
constexpr unsigned SFPIADD_MOD1_ARG_2SCOMP_LREG_DST = 6;
constexpr unsigned SFPIADD_MOD1_ARG_IMM = 7;
constexpr unsigned SFPIADD_MOD1_ARG_LREG_DST = 0;
constexpr unsigned SFPIADD_MOD1_CC_GTE0 = 1;
constexpr unsigned SFPIADD_MOD1_CC_LT0 = 2;
constexpr unsigned SFPIADD_MOD1_CC_NONE = 3;
constexpr unsigned SFPIADD_MOD1_IMM_NO_CC = 4;
constexpr unsigned SFPIADD_MOD1_REG_NO_CC = 5;
constexpr unsigned SFPLOADI_MOD0_FLOATA = 6;
constexpr unsigned SFPLOADI_MOD0_FLOATB = 7;
constexpr unsigned SFPLOADI_MOD0_LOWER = 0;
constexpr unsigned SFPLOADI_MOD0_SHORT = 1;
constexpr unsigned SFPLOADI_MOD0_UPPER = 2;
constexpr unsigned SFPLOADI_MOD0_USHORT = 3;
constexpr unsigned SFPLOAD_INSTR_MOD = 4;
constexpr unsigned SFPLOAD_MOD0_FMT_SRCB = 5;
constexpr unsigned SFPLZ_MOD1_CC_NE0 = 6;
constexpr unsigned SFPLZ_MOD1_CC_NONE = 7;
constexpr unsigned SFPMAD_MOD1_INDIRECT_VA = 0;
constexpr unsigned SFPMAD_MOD1_INDIRECT_VD = 1;
constexpr unsigned SFPMAD_MOD1_NEGATE_VA = 2;
constexpr unsigned SFPMAD_MOD1_NEGATE_VC = 3;
constexpr unsigned SFPMAD_MOD1_OFFSET_NONE = 4;
constexpr unsigned SFPMEM_MODE = 5;
constexpr unsigned SFPMOV_MOD1_CONFIG = 6;
constexpr unsigned SFPMOV_MOD1_FROM_RS = 7;
constexpr unsigned SFPMOV_MOD1_NEGATE = 0;
constexpr unsigned SFPSETCC_MOD1_LREG_EQ0 = 1;
constexpr unsigned SFPSETCC_MOD1_LREG_GTE0 = 2;
constexpr unsigned SFPSETCC_MOD1_LREG_LT0 = 3;
constexpr unsigned SFPSETCC_MOD1_LREG_NE0 = 4;
constexpr unsigned SFPSETEXP_MOD1_ARG_EXPONENT = 5;
constexpr unsigned SFPSETEXP_MOD1_ARG_IMM = 6;
constexpr unsigned SFPSETMAN_MOD1_ARG_IMM = 7;
constexpr unsigned SFPSETSGN_MOD1_ARG_IMM = 0;
constexpr unsigned SFPSETSGN_MOD1_SIGN_FROM_IMM = 1;
constexpr unsigned SFPSHFT2_MOD1_SHFT_IMM = 2;
constexpr unsigned SFPSHFT2_MOD1_SHFT_LREG = 3;
constexpr unsigned SFPSHFT2_MOD1_SUBVEC_SHFLROR1 = 4;
constexpr unsigned SFPSHFT_MOD1_ARG_IMM = 5;
constexpr unsigned SFPSHFT_MOD1_ARG_IMM_USE_VC = 6;
constexpr unsigned SFPSHFT_MOD1_IMM_SRC_C = 7;
constexpr unsigned SFPSHFT_MOD1_SHIFT_IMM = 0;
constexpr unsigned SFPSTOCHRND_MOD1_FP32_TO_FP16A = 1;
constexpr unsigned SFPSTOCHRND_MOD1_FP32_TO_FP16B = 2;
constexpr unsigned SFPSTOCHRND_MOD1_FP32_TO_INT16 = 3;
constexpr unsigned SFPSTOCHRND_MOD1_FP32_TO_INT8 = 4;
constexpr unsigned SFPSTOCHRND_MOD1_FP32_TO_UINT16 = 5;
constexpr unsigned SFPSTOCHRND_MOD1_FP32_TO_UINT8 = 6;
constexpr unsigned SFPSTOCHRND_RND_EVEN = 7;
constexpr unsigned SFPSTOCHRND_RND_STOCH = 0;
constexpr unsigned SFPSTORE_MOD0_FMT_LO16 = 1;
constexpr unsigned SFPSTORE_MOD0_FMT_SRCB = 2;
constexpr unsigned SFPSTORE_MODE_SWAP_HI_LO16 = 3;
constexpr unsigned SFPSWAP_MOD1_SWAP = 4;
constexpr unsigned SFPSWAP_MOD1_VEC_MIN_MAX = 5;
}  // namespace sfpi_standin_constants

using namespace sfpi_standin_constants;

namespace sfpi {
using namespace ::sfpi_standin_constants;
}  // namespace sfpi
