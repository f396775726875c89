// Journal policy of the SJ-KVaRN cache (docs/SPEC.md §9.4, §9.5): decides when the exact
// tail (ring) is sealed into group records, how far an idle step may seal, and where a
// truncation resumes. Pure integer state, no allocation, so the same code runs on the
// host and inside a kernel.
//
// All arithmetic is unsigned 32-bit exactly as the spec writes it: the serialized state
// and the golden state streams depend on these exact values, so every subtraction is
// guarded by the spec's own comparison instead of being done in a wider type.
#pragma once

#include <cstdint>
#include <type_traits>

#include "sjkv/hd.h"

namespace sjkv {

// Returned by JournalPolicy::truncate while a seal is pending (§9.5 NO_POS).
constexpr uint32_t kNoPos = 0xFFFFFFFFu;

// group_floor(sink, G, pos) of §9.5: positions inside the sink are kept exactly; past it,
// round down to a group boundary because only whole records can be kept or dropped.
SJKV_HD inline uint32_t group_floor(uint32_t sink, uint32_t group, uint32_t pos) {
  if (pos <= sink) return pos;
  return sink + group * ((pos - sink) / group);
}

// Ring rows needed (§9.4): the longest tail, plus one partly filled group, plus two
// ubatches (a seal may read the previous ubatch's rows while this one is written),
// rounded up to 128 rows. Example: defaults with n_ubatch 512 -> 9344.
SJKV_HD inline uint32_t ring_capacity(uint32_t tail, uint32_t tail_max, uint32_t group,
                                      uint32_t n_ubatch) {
  const uint32_t longest = tail_max > tail ? tail_max : tail;
  const uint32_t rows = longest + group + 2u * n_ubatch;
  return 128u * ((rows + 127u) / 128u);
}

// Largest tail / tail_max and ubatch sjkv accepts (sjkv limits, not the spec's): with them
// ring_capacity stays far below 2^32, so its 32-bit sum cannot wrap (a wrapped capacity of 0
// would divide by zero in ring_slot, a small one would overwrite live rows).
constexpr uint32_t kMaxTail = 1u << 30;
constexpr uint32_t kMaxUbatch = 1u << 20;

// Whether ring_capacity(tail, tail_max, group, n_ubatch) is exact: every argument within the
// limits above (group <= 2^16 as well) and n_ubatch > 0.
SJKV_HD inline bool ring_capacity_valid(uint32_t tail, uint32_t tail_max, uint32_t group, uint32_t n_ubatch) {
  return tail <= kMaxTail && tail_max <= kMaxTail && group <= (1u << 16) && n_ubatch >= 1 && n_ubatch <= kMaxUbatch;
}

// Ring slot of position p (§9.4). Precondition: p >= sink (sink positions have their own
// storage and never reach the ring).
SJKV_HD inline uint32_t ring_slot(uint32_t p, uint32_t sink, uint32_t cap) {
  return (p - sink) % cap;
}

// Per-sequence policy state (§9.5). Trivial on purpose: it is copied to the device and
// saved in the sequence state, so it has no constructor; call init() before use.
struct JournalPolicy {
  uint32_t sink;         // first position that goes through the ring / body
  uint32_t tail;         // exact positions always kept unsealed after a seal
  uint32_t tail_max;     // tail length that triggers a seal; 0 = fixed tail (seal every ubatch)
  uint32_t group;        // G, positions per record
  uint32_t flush_chunk;  // max groups sealed per small ubatch; 0 = unlimited
  uint32_t B;            // sealed end: [sink, B) lives in records
  uint32_t B_prev;       // B before the last commit (its rows may still be read this ubatch)
  uint32_t B_pending;    // seal target of the step in progress, B <= B_pending
  uint32_t draining;     // 1 while a chunk-limited seal still owes groups

  SJKV_HD void init(uint32_t sink_, uint32_t tail_, uint32_t tail_max_, uint32_t group_,
                    uint32_t flush_chunk_) {
    sink = sink_;
    tail = tail_;
    tail_max = tail_max_;
    group = group_;
    flush_chunk = flush_chunk_;
    reset();
  }

  SJKV_HD void reset() {
    B = sink;
    B_prev = sink;
    B_pending = sink;
    draining = 0;
  }

  SJKV_HD uint32_t group_floor(uint32_t pos) const { return sjkv::group_floor(sink, group, pos); }

  // Sealing only reads positions < pos0, so it can run before this ubatch's rows are
  // written. Returns the seal target; the caller seals [B, target) and then commits.
  SJKV_HD uint32_t begin_ubatch(uint32_t pos0, uint32_t n_tokens) {
    B_pending = B;
    // A fixed tail seals at every ubatch; an adaptive one lets the tail grow to tail_max
    // and then seals back down to `tail`, so sealing happens in rare large batches.
    const bool due = tail_max == 0 || draining != 0 || (pos0 > B && pos0 - B >= tail_max);
    draining = 0;
    if (due && pos0 > sink + tail) {
      uint32_t target = sink + group * ((pos0 - tail - sink) / group);
      if (target < B) target = B;
      // Small (decode) ubatches spread a big seal over several steps to bound the
      // per-token latency; prefill-sized ubatches pay it at once.
      if (tail_max > 0 && flush_chunk > 0 && n_tokens < group) {
        const uint32_t limit = B + group * flush_chunk;
        if (target > limit) {
          target = limit;
          draining = 1;
        }
      }
      B_pending = target;
    }
    return B_pending;
  }

  SJKV_HD void commit() {
    B_prev = B;
    B = B_pending;
  }

  // Decoding a block: the most positions r in [1, limit] that one ubatch begin_ubatch(pos0, r)
  // may run, starting from this state, and leave B and draining as r one-token ubatches would
  // (then every query of the block sees the B a one-token step would have seen). A block stops
  // before the next seal a one-token step would make. The flush_chunk limit, which a block of
  // G or more escapes, needs no cut of its own: a one-token step it clamps leaves draining set,
  // so the next position is a seal and the run is 1. B_prev alone differs until the next
  // commit. Preconditions: limit >= 1, pos0 + limit < 2^32. Stepping copies costs a few
  // integer operations a position, and limit is at most a ubatch.
  SJKV_HD uint32_t decode_run(uint32_t pos0, uint32_t limit) const {
    JournalPolicy step = *this;
    step.begin_ubatch(pos0, 1);
    step.commit();
    uint32_t r = 1;
    while (r < limit) {
      JournalPolicy next = step;
      next.begin_ubatch(pos0 + r, 1);
      next.commit();
      if (next.B != step.B || next.draining != step.draining) break;
      step = next;
      ++r;
    }
    return r;
  }

  // Seal while no ubatch is running (library 2.0). keep_recent > tail keeps that many
  // recent positions exact (e.g. a prompt suffix likely to be re-rendered); the 1.x form
  // is keep_recent = 0. Returns the seal target; the caller seals and commits when it is > B.
  SJKV_HD uint32_t idle(uint32_t end, uint32_t keep_recent) {
    B_pending = B;
    if (tail_max == 0 || end <= sink + tail) return B;  // a fixed tail is already minimal
    const uint32_t full = sink + group * ((end - tail - sink) / group);
    uint32_t target = full;
    bool clamped = false;
    if (keep_recent > tail) {
      const uint32_t keep_from = end > keep_recent ? end - keep_recent : 0u;
      const uint32_t lim = keep_from <= sink ? sink : group_floor(keep_from);
      if (lim < full) {
        target = lim;
        clamped = true;
      }
    }
    // Only a seal that reaches the full target settles a pending chunked drain.
    if (!clamped) draining = 0;
    if (target <= B) return B;  // idle never lowers B
    B_pending = target;
    return target;
  }

  // Where a cut at pos can resume: exact in the sink and the ring, rounded down to a group
  // boundary inside the body because a record cannot be partly kept.
  SJKV_HD uint32_t trunc_floor(uint32_t pos) const {
    if (pos >= B || pos <= sink) return pos;
    return group_floor(pos);
  }

  // Cut the sequence at pos. Returns the resume position r (the caller keeps [0, r) and
  // re-prefills from r) and the number of dropped records; kNoPos while a seal is pending,
  // because the records of [B, B_pending) would be half written.
  SJKV_HD uint32_t truncate(uint32_t pos, uint32_t* n_dropped) {
    if (n_dropped) *n_dropped = 0;
    if (B_pending != B) return kNoPos;
    const uint32_t r = trunc_floor(pos);
    if (r < B) {
      const uint32_t nb = r > sink ? r : sink;
      if (n_dropped) *n_dropped = (B - nb) / group;
      B = nb;
      B_prev = nb;
      B_pending = nb;
      draining = 0;
    }
    return r;
  }
};

static_assert(std::is_trivially_copyable<JournalPolicy>::value &&
                  std::is_standard_layout<JournalPolicy>::value,
              "JournalPolicy is copied to the device and into saved state as plain bytes");
static_assert(sizeof(JournalPolicy) == 9 * sizeof(uint32_t), "JournalPolicy is nine u32 fields");

}  // namespace sjkv
