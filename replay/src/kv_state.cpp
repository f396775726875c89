// The store of a recurrent layer's state (kv.h RecurrentState): the convolution window and one
// matrix per value head, held in the arm's state format as rows of that format.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv_arms_formats.h"
#include "sjkv/replay/kv.h"

namespace sjkv {
namespace replay {
namespace {

using namespace fmt;

RowFormat row_format(StateFormat f) {
  switch (f) {
    case StateFormat::f16: return RowFormat::f16;
    case StateFormat::bf16: return RowFormat::bf16;
    case StateFormat::q8_0: return RowFormat::q8_0;
    case StateFormat::f32: break;
  }
  return RowFormat::f32;
}

class StateLayer final : public RecurrentState {
 public:
  StateLayer(const LayerShape& s, StateFormat f) : shape_(s.state), fmt_(f), rf_(row_format(f)) {
    const RecurrentShape& r = shape_;
    if (r.conv_dim == 0 || r.heads == 0 || r.head_dim == 0 || r.conv_dim > (1u << 24) || r.head_dim > 4096 ||
        r.heads > 65536 || r.conv_rows > 64)
      throw std::invalid_argument("recurrent state: bad shape (conv " + std::to_string(r.conv_rows) + " x " +
                                  std::to_string(r.conv_dim) + ", " + std::to_string(r.heads) + " heads of " +
                                  std::to_string(r.head_dim) + ")");
    const uint32_t bv = block_values(rf_);
    if (r.conv_dim % bv != 0 || r.head_dim % bv != 0)
      throw std::invalid_argument(std::string("recurrent state: ") + state_format_name(f) + " needs the conv width (" +
                                  std::to_string(r.conv_dim) + ") and the head size (" + std::to_string(r.head_dim) +
                                  ") to be multiples of " + std::to_string(bv));
    conv_row_ = row_bytes(rf_, r.conv_dim);
    head_row_ = row_bytes(rf_, r.head_dim);
    conv_.resize(size_t(r.conv_rows) * conv_row_);
    heads_.resize(size_t(r.heads) * r.head_dim * head_row_);
    // Zeros in every format (a zero scale and zero codes, +0 halves).
    std::vector<float> zero(std::max(r.conv_dim, r.head_dim), 0.0f);
    for (uint32_t i = 0; i < r.conv_rows; ++i) encode_row(rf_, zero.data(), r.conv_dim, conv_.data() + i * conv_row_);
    for (size_t i = 0; i < size_t(r.heads) * r.head_dim; ++i)
      encode_row(rf_, zero.data(), r.head_dim, heads_.data() + i * head_row_);
  }

  void begin_ubatch(uint32_t pos0, uint32_t n) override {
    if (pos0 != n_pos_)
      throw std::invalid_argument("recurrent state: ubatch at position " + std::to_string(pos0) + ", expected " +
                                  std::to_string(n_pos_));
    n_pos_ += n;
  }
  void store(uint32_t, uint32_t, const float*, const float*) override {
    throw std::logic_error("recurrent state: a recurrent layer stores no K/V");
  }
  void attend(uint32_t, uint32_t, const float*, float, float*) override {
    throw std::logic_error("recurrent state: a recurrent layer has no attention");
  }
  // A fixed size, charged per position over K and V (cache_bits adds it to the attention
  // layers' bits).
  LayerBits bits() const override {
    LayerBits out;
    out.fixed = 8.0 * static_cast<double>(bytes());
    return out;
  }
  LayerBits bits_at(uint32_t) const override { return bits(); }
  uint32_t decode_run(uint32_t, uint32_t limit) const override { return limit; }
  void idle(uint32_t) override {}

  const RecurrentShape& shape() const override { return shape_; }
  StateFormat format() const override { return fmt_; }
  void read_conv(float* w) const override {
    for (uint32_t i = 0; i < shape_.conv_rows; ++i)
      decode_row(rf_, conv_.data() + i * conv_row_, shape_.conv_dim, w + size_t(i) * shape_.conv_dim);
  }
  void push_conv(const float* row) override {
    if (shape_.conv_rows == 0) return;
    std::memmove(conv_.data(), conv_.data() + conv_row_, (shape_.conv_rows - 1) * conv_row_);
    put(row, shape_.conv_dim, conv_.data() + (shape_.conv_rows - 1) * conv_row_);
  }
  void read_head(uint32_t h, float* m) const override {
    const uint32_t S = shape_.head_dim;
    const uint8_t* base = heads_.data() + size_t(h) * S * head_row_;
    for (uint32_t j = 0; j < S; ++j) decode_row(rf_, base + j * head_row_, S, m + size_t(j) * S);
  }
  void write_head(uint32_t h, const float* m) override {
    const uint32_t S = shape_.head_dim;
    uint8_t* base = heads_.data() + size_t(h) * S * head_row_;
    for (uint32_t j = 0; j < S; ++j) put(m + size_t(j) * S, S, base + j * head_row_);
  }
  uint64_t bytes() const override { return conv_.size() + heads_.size(); }

 private:
  void put(const float* x, uint32_t d, uint8_t* out) const {
    if (!encode_row(rf_, x, d, out)) throw std::runtime_error("recurrent state: a non-finite state value");
  }

  RecurrentShape shape_;
  StateFormat fmt_;
  RowFormat rf_;
  uint32_t n_pos_ = 0;
  size_t conv_row_ = 0, head_row_ = 0;
  std::vector<uint8_t> conv_, heads_;
};

}  // namespace

const char* state_format_name(StateFormat f) {
  switch (f) {
    case StateFormat::f32: return "f32";
    case StateFormat::f16: return "f16";
    case StateFormat::bf16: return "bf16";
    case StateFormat::q8_0: return "q8_0";
  }
  return "?";
}

std::unique_ptr<LayerKv> make_state_layer(const LayerShape& s, StateFormat f) {
  if (!s.recurrent) throw std::invalid_argument("make_state_layer: layer " + std::to_string(s.layer) + " is not recurrent");
  return std::make_unique<StateLayer>(s, f);
}

}  // namespace replay
}  // namespace sjkv
