// The store of a shared-KV layer: its own translation unit, so a binary that brings its own arms
// (the test tool's fake model) links the factory without the arms.
#include <stdexcept>
#include <string>

#include "sjkv/replay/kv.h"

namespace sjkv {
namespace replay {
namespace {

// A shared-KV layer's store: nothing (its rows are its source layer's).
class SharedLayer final : public LayerKv {
 public:
  explicit SharedLayer(const LayerShape& s) : layer_(s.layer), source_(s.kv_source) {}
  void begin_ubatch(uint32_t, uint32_t) override {}
  void store(uint32_t, uint32_t, const float*, const float*) override {}
  void attend(uint32_t, uint32_t, const float*, float, float*) override {
    throw std::logic_error("layer " + std::to_string(layer_) + " keeps no cache: it attends layer " +
                           std::to_string(source_) + "'s");
  }
  LayerBits bits() const override { return {}; }
  LayerBits bits_at(uint32_t) const override { return {}; }
  uint32_t decode_run(uint32_t, uint32_t limit) const override { return limit; }
  void idle(uint32_t) override {}

 private:
  uint32_t layer_;
  int32_t source_;
};

}  // namespace

std::unique_ptr<LayerKv> make_shared_layer(const LayerShape& s) {
  if (s.kv_source < 0 || static_cast<uint32_t>(s.kv_source) >= s.layer)
    throw std::invalid_argument("layer " + std::to_string(s.layer) + ": a shared-KV layer reads an earlier layer, not " +
                                std::to_string(s.kv_source));
  return std::make_unique<SharedLayer>(s);
}

}  // namespace replay
}  // namespace sjkv
