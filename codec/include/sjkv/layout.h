// Record geometry and bit addressing (docs/SPEC.md §5).
//
// One record: one KV head over one group of G tokens. Fields, in byte order:
//   K payload (D*bits_k/8)*G | V payload (D*bits_v/8)*G | Kscale[D] | Kzero[D] | Ktok[G] |
//   Vch[D] | Vscale[G] | Vzero[G]      (scales fp16 little-endian)
#pragma once

#include "sjkv/hd.h"

namespace sjkv {

enum class Body : uint32_t { scalar = 0, trellis = 1, automatic = 2 };
enum class Side : uint32_t { k = 0, v = 1 };
// Which axis a trellis sequence runs along (sjkv extension, docs/CODEC.md "Trellis axis").
// token (format version 1, docs/SPEC.md §7.2): one sequence per channel d along the G tokens,
// code (t, d) at payload bit (d*G + t)*b. channel: one sequence per token row t along its D
// channels, code (t, d) at payload bit (t*D + d)*b. Scalar bodies ignore it (always token).
enum class TrellisAxis : uint32_t { token = 0, channel = 1 };

// AUTO -> trellis for 3/3, 3/2 and 2/2, scalar otherwise (§5.1).
SJKV_HD inline Body resolve_body(Body b, uint32_t bits_k, uint32_t bits_v) {
  if (b != Body::automatic) return b;
  const bool t = (bits_k == 2 || bits_k == 3) && (bits_v == 2 || bits_v == 3) && bits_v <= bits_k;
  return t ? Body::trellis : Body::scalar;
}

struct RecordLayout {
  uint32_t head_dim = 0;  // D
  uint32_t group = 0;     // G
  uint32_t bits_k = 0;
  uint32_t bits_v = 0;
  Body body = Body::scalar;  // resolved: scalar or trellis
  TrellisAxis axis = TrellisAxis::token;  // trellis bodies only; token for scalar bodies
  uint32_t k_payload = 0, v_payload = 0, k_scale = 0, k_zero = 0, k_tok = 0, v_ch = 0, v_scale = 0,
           v_zero = 0, bytes = 0;

  // 4-bit scalar sides use the tensor-core fragment order and permuted channel scales.
  SJKV_HD bool k_fragment() const { return body == Body::scalar && bits_k == 4; }
  SJKV_HD bool v_fragment() const { return body == Body::scalar && bits_v == 4; }
  SJKV_HD bool channel_axis() const { return body == Body::trellis && axis == TrellisAxis::channel; }
  // Trellis sequences of one side: how many, and how many codes each (G tokens or D channels).
  SJKV_HD uint32_t trellis_seqs() const { return channel_axis() ? group : head_dim; }
  SJKV_HD uint32_t trellis_len() const { return channel_axis() ? head_dim : group; }
};

// Offsets for a geometry the caller has already validated (see can_implement()).
SJKV_HD inline RecordLayout make_layout(uint32_t d, uint32_t g, uint32_t bits_k, uint32_t bits_v, Body resolved,
                                        TrellisAxis axis = TrellisAxis::token) {
  RecordLayout l;
  l.axis = resolved == Body::trellis ? axis : TrellisAxis::token;
  l.head_dim = d;
  l.group = g;
  l.bits_k = bits_k;
  l.bits_v = bits_v;
  l.body = resolved;
  l.k_payload = 0;
  l.v_payload = l.k_payload + (d * bits_k / 8) * g;
  l.k_scale = l.v_payload + (d * bits_v / 8) * g;
  l.k_zero = l.k_scale + 2 * d;
  l.k_tok = l.k_zero + 2 * d;
  l.v_ch = l.k_tok + 2 * g;
  l.v_scale = l.v_ch + 2 * d;
  l.v_zero = l.v_scale + 2 * g;
  l.bytes = l.v_zero + 2 * g;
  return l;
}

// Stored index of channel d's K scale/zero and V channel scale (§5.6).
SJKV_HD inline uint32_t k_ch_idx(const RecordLayout& l, uint32_t d) {
  if (!l.k_fragment()) return d;
  const uint32_t c = d / 16, dd = d % 16, jj = dd / 2, e = dd % 2;
  return (jj % 4) * (l.head_dim / 4) + 4 * c + 2 * (jj / 4) + e;
}

SJKV_HD inline uint32_t v_ch_idx(const RecordLayout& l, uint32_t d) {
  if (!l.v_fragment()) return d;
  const uint32_t c = d / 16, dd = d % 16;
  return (dd % 8) * (l.head_dim / 8) + 2 * c + dd / 8;
}

// Bit offset of the code of (token t, channel d) inside one side's payload (§5.5).
SJKV_HD inline uint32_t code_bit(const RecordLayout& l, Side side, uint32_t t, uint32_t d) {
  const uint32_t b = side == Side::k ? l.bits_k : l.bits_v;
  if (l.body == Body::trellis)
    return l.axis == TrellisAxis::channel ? (t * l.head_dim + d) * b : (d * l.group + t) * b;
  const bool frag = side == Side::k ? l.k_fragment() : l.v_fragment();
  if (!frag) return t * (l.head_dim * b) + d * b;
  const uint32_t s = t / 16, tt = t % 16, c = d / 16, dd = d % 16;
  uint32_t lane, r, e;
  if (side == Side::k) {
    lane = 4 * (tt % 8) + (dd / 2) % 4;
    r = tt / 8 + 2 * (dd / 8);
    e = dd % 2;
  } else {
    lane = 4 * (dd % 8) + (tt / 2) % 4;
    r = dd / 8 + 2 * (tt / 8);
    e = tt % 2;
  }
  const uint32_t nibble = r + 4 * e;
  const uint32_t word = (s * (l.head_dim / 16) + c) * 32 + lane;
  return 32 * word + 4 * nibble;
}

// Little-endian bit stream helpers; codes may straddle a byte boundary.
SJKV_HD inline void put_bits(uint8_t* p, uint32_t bit, uint32_t nbits, uint32_t value) {
  const uint32_t byte = bit >> 3, sh = bit & 7;
  const uint32_t v = value << sh;
  p[byte] = static_cast<uint8_t>(p[byte] | (v & 0xff));
  if (sh + nbits > 8) p[byte + 1] = static_cast<uint8_t>(p[byte + 1] | ((v >> 8) & 0xff));
}

SJKV_HD inline uint32_t get_bits(const uint8_t* p, uint32_t bit, uint32_t nbits) {
  const uint32_t byte = bit >> 3, sh = bit & 7;
  uint32_t v = p[byte];
  if (sh + nbits > 8) v |= static_cast<uint32_t>(p[byte + 1]) << 8;
  return (v >> sh) & ((1u << nbits) - 1u);
}

SJKV_HD inline uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
SJKV_HD inline void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xff);
  p[1] = static_cast<uint8_t>(v >> 8);
}

}  // namespace sjkv
