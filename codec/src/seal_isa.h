// Internal: the per-ISA copies of the vectorised sealer (scalar and trellis bodies).
#pragma once

#include "sjkv/seal.h"

namespace sjkv {

// Nibble index (8*lane + nibble) inside a 16x16 fragment tile of element (tt, dd), at
// [tt*16 + dd], for the K or V side (docs/SPEC.md §5.5 (c)).
const uint8_t* fragment_tile_positions(Side side);

#define SJKV_DECLARE_ISA(ns)                                                                         \
  namespace ns {                                                                                     \
  void seal_record_scalar(const RecordLayout& l, const SealOptions& opt, const uint16_t* k_rows,     \
                          const uint16_t* v_rows, size_t stride, uint8_t* rec, SealWorkspace& ws);   \
  void seal_record_trellis(const RecordLayout& l, const SealOptions& opt, const uint16_t* k_rows,    \
                           const uint16_t* v_rows, size_t stride, uint8_t* rec, SealWorkspace& ws);  \
  void viterbi_codes(const float* y, uint32_t n, uint32_t bits, const float* cbf, void* choice,            \
                     uint8_t* codes, uint16_t* wins);                                                      \
  }
SJKV_DECLARE_ISA(isa_baseline)
#if defined(__x86_64__)
SJKV_DECLARE_ISA(isa_avx2)
SJKV_DECLARE_ISA(isa_avx512)
#endif
#undef SJKV_DECLARE_ISA

}  // namespace sjkv
