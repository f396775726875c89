// Inspection side of the cache arms (kv.h): what tests and tools need to check an arm
// against a plain reference. Every LayerKv that make_layer() returns is an InspectableKv.
#pragma once

#include <cstdint>

#include "sjkv/cache.h"
#include "sjkv/replay/kv.h"

namespace sjkv {
namespace replay {

class InspectableKv : public LayerKv {
 public:
  // Positions stored so far ([0, n_stored)).
  virtual uint32_t n_stored() const = 0;
  // K and V of position p, KV head h, as the arm reads them, in the model's basis (any
  // rotation undone): D floats each.
  virtual void decode_row(uint32_t h, uint32_t p, float* k, float* v) const = 0;
  // Rows [p0, p1) of KV head h exactly as attend reads them, in the stored (rotated) basis:
  // [p1 - p0][D] floats each. For the codec arms these equal the codec's resolve_row.
  virtual void stored_rows(uint32_t h, uint32_t p0, uint32_t p1, float* k, float* v) const = 0;
  // Hadamard block applied to K and the queries (0: none) and to V / undone on the output
  // (the turbo arms use the fork's signed transform on 128-value groups).
  virtual uint32_t k_rotation() const = 0;
  virtual uint32_t v_rotation() const = 0;
  // The codec cache behind an SJ or KVarN arm (null for the row formats); its rows are
  // in the rotated basis, rotation block k_rotation().
  virtual const SequenceCache* codec_cache() const { return nullptr; }
  // Short name of what this layer stores ("f16", "q4_0:rot", "sj:4/4:D=...").
  virtual std::string storage_name() const = 0;
};

}  // namespace replay
}  // namespace sjkv
