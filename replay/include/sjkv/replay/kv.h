// The cache arms of sjkv-replay: how one layer's K/V is stored and attended to. The forward
// pass (model.h) calls these; each arm spec ("f16", "q4_0:rot", "sj:3/2t", ...) names one
// implementation. Contract:
//  - positions arrive in order, a ubatch at a time: begin_ubatch, store, attend;
//  - K/V rows are the model's (after k-norm and RoPE), f32, [n][n_head_kv][head_dim];
//  - attend is causal (query i of the ubatch sees positions <= pos0 + i, and only the last
//    `window` of them when the layer slides), online softmax, GQA (query head h reads KV head
//    h / (n_head / n_head_kv)), logits soft-capped when the shape says so, a learned sink
//    logit per query head in the softmax when the shape has them; compressed arms
//    attend over what they store, fused, never materialising a decoded cache;
//  - results depend on nothing but the inputs: the same bytes for any thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sjkv/cache.h"
#include "sjkv/io/table_set.h"

namespace sjkv {
namespace replay {

// The fixed-size state of a recurrent (Gated DeltaNet) layer of a hybrid model: the causal
// convolution's window of its last conv_rows inputs ([conv_rows][conv_dim]) and one
// [head_dim][head_dim] matrix per value head (row j = value index, key index contiguous).
struct RecurrentShape {
  uint32_t conv_rows = 0, conv_dim = 0, heads = 0, head_dim = 0;
  uint64_t values() const { return uint64_t(conv_rows) * conv_dim + uint64_t(heads) * head_dim * head_dim; }
};

struct LayerShape {
  uint32_t layer = 0;
  bool full_attention = true;   // false: sliding-window layer (kept f16 unless the arm says otherwise), or recurrent
  bool recurrent = false;       // a recurrent layer: no K/V, a fixed-size state (`state`) instead
  RecurrentShape state;
  uint32_t window = 0;          // sliding window in positions, 0 = none
  // A shared-KV layer (Gemma 4's E series): the earlier layer whose stored rows it attends,
  // compressed or not, as the engine does; it keeps no cache (make_layer gives it an empty
  // store). -1: the layer stores its own K/V.
  int32_t kv_source = -1;
  float softcap = 0.0f;         // attention logits soft-capped to cap * tanh(s / cap) (Gemma 2), 0 = none
  // Learned attention sinks (gpt-oss): one logit per query head that joins every query's
  // softmax with no value row, so the weights of the stored positions sum to less than 1
  // (llama.cpp's soft_max with sinks). Empty: none. Not the format's 16-bit sink tokens.
  std::vector<float> sink_logits;
  uint32_t n_head = 1;
  uint32_t n_head_kv = 1;
  uint32_t head_dim = 128;
  uint32_t n_ctx = 0;           // most positions this sequence will reach
  uint32_t n_ubatch = 512;
};

// Bits per K/V value of one layer at its current length (the arm's own accounting; 32 for f32).
struct LayerBits {
  double occupied = 0.0;   // bytes holding the stored positions, over 2*D values per position and head
  double allocated = 0.0;  // bytes reserved up front for n_ctx, over the same values
  // A recurrent state's size in bits, which does not grow with the positions (its occupied and
  // allocated stay 0: cache_bits divides this by the values of the positions the attention
  // layers hold).
  double fixed = 0.0;
};

class RecurrentState;

class LayerKv {
 public:
  virtual ~LayerKv() = default;
  // Before a ubatch of n tokens at [pos0, pos0 + n); the SJ arms run their journal policy here.
  virtual void begin_ubatch(uint32_t pos0, uint32_t n) = 0;
  // Store the ubatch's rows; k and v are [n][n_head_kv][head_dim]. Throws std::runtime_error
  // when the arm cannot store them (e.g. non-finite values).
  virtual void store(uint32_t pos0, uint32_t n, const float* k, const float* v) = 0;
  // q [n][n_head][head_dim] -> out [n][n_head][head_dim]; logits are scale * q.k.
  virtual void attend(uint32_t pos0, uint32_t n, const float* q, float scale, float* out) = 0;
  virtual LayerBits bits() const = 0;
  // bits() as it was with the first n positions stored (n at most those stored now) and the
  // journal as it is now: one-token decoding's figure for each row of a decoded block.
  virtual LayerBits bits_at(uint32_t n) const = 0;
  // Blocked decoding: how many positions from pos0 (1 to limit) one ubatch may run and give the
  // bits of one-token ubatches. Only a journal has events (policy.h decode_run); pure so that a
  // wrapper cannot forget to forward it.
  virtual uint32_t decode_run(uint32_t pos0, uint32_t limit) const = 0;
  // A server's idle step between requests (CODEC-SPEC 8.4): seal, keeping at least keep_recent
  // recent positions exact. Nothing to do without a journal.
  virtual void idle(uint32_t keep_recent) = 0;
  // The state of a recurrent layer (LayerShape::recurrent), null for an attention layer.
  virtual RecurrentState* recurrent() { return nullptr; }
};

// How a recurrent layer's state is kept between tokens: f32 as llama.cpp (the reference and
// the default of every arm), or rounded to f16, bf16 or q8_0 blocks after every token (an sjkv
// extension, the arm option state=). Its bytes count in the arm's bits (cache_bits).
enum class StateFormat : uint8_t { f32, f16, bf16, q8_0 };
const char* state_format_name(StateFormat f);

// A recurrent layer's store (what make_layer returns for one). The forward pass pushes each
// token's convolution inputs and, in a format other than f32, writes and reads each head back
// after every token, so the state is rounded once a token whatever the ubatch. begin_ubatch
// counts the positions; store and attend are not used.
class RecurrentState : public LayerKv {
 public:
  virtual const RecurrentShape& shape() const = 0;
  virtual StateFormat format() const = 0;
  // The convolution window, [conv_rows][conv_dim], oldest row first (zeros at the start);
  // push_conv drops the oldest row and appends one token's inputs.
  virtual void read_conv(float* w) const = 0;
  virtual void push_conv(const float* row) = 0;
  // Value head h's matrix, [head_dim][head_dim] (zeros at the start).
  virtual void read_head(uint32_t h, float* m) const = 0;
  virtual void write_head(uint32_t h, const float* m) = 0;
  // Bytes the state takes in its format.
  virtual uint64_t bytes() const = 0;
  RecurrentState* recurrent() override { return this; }
};
// The store of a recurrent layer in format f; std::invalid_argument for a shape f cannot hold
// (q8_0 needs conv_dim and head_dim multiples of 32).
std::unique_ptr<LayerKv> make_state_layer(const LayerShape& s, StateFormat f);
// The store of a shared-KV layer (LayerShape::kv_source >= 0): it holds nothing and costs no
// bits; stores are dropped (the forward pass writes the source layer) and attend is a logic
// error (the forward pass attends the source's store). std::invalid_argument unless the source
// is an earlier layer.
std::unique_ptr<LayerKv> make_shared_layer(const LayerShape& s);

class KvArm {
 public:
  virtual ~KvArm() = default;
  const std::string& spec() const { return spec_; }
  // How recurrent layers keep their state (state=; f32 unless the spec says otherwise).
  StateFormat state_format() const { return state_; }
  // One store per layer; sliding layers get f16 unless the arm compresses them too, recurrent
  // layers make_state_layer in the arm's state format, shared-KV layers make_shared_layer.
  std::unique_ptr<LayerKv> make_layer(const LayerShape& s) const {
    return s.recurrent ? make_state_layer(s, state_) : s.kv_source >= 0 ? make_shared_layer(s) : make_attention_layer(s);
  }
  // True when every sliding-window layer this arm makes stores plain f16 rows, unrotated (as
  // make_arm("f16") does), and recurrent layers keep an f32 state: the layers before the first
  // full-attention layer then compute the same bits for every such arm, and a replay of several
  // arms runs them once.
  bool plain_f16_sliding() const { return state_ == StateFormat::f32 && plain_f16_sliding_layers(); }
  // Throws std::invalid_argument when the spec names layers the model lacks (layers=, wide=).
  virtual void check_layers(const std::vector<LayerShape>& /*layers*/) const {}

 protected:
  virtual std::unique_ptr<LayerKv> make_attention_layer(const LayerShape& s) const = 0;
  virtual bool plain_f16_sliding_layers() const { return false; }
  std::string spec_;
  StateFormat state_ = StateFormat::f32;
};

// Parses an arm spec (docs/REPLAY.md lists the grammar). std::invalid_argument with a
// one-line reason on a bad spec. The SJ-KVaRN / KVarN arms seal each layer's records with a
// sealer from `sealers` (Device::sealers: a GPU, the same bytes) or, when it is empty, the CPU.
std::unique_ptr<KvArm> make_arm(const std::string& spec, const SealerSource& sealers = {});
// The specs make_arm accepts, for --help and errors.
std::vector<std::string> arm_examples();
// The arm as it runs on this model: a token-axis trellis SJ arm that names no tables (cb=)
// gets ":cb=SET" when `choice` picks a shipped set for its widths on model `g` (null: model
// unknown); every other spec is returned as it is. Results, stores and comparisons use the
// returned string, so the tables an arm sealed with are in its name. Throws as make_arm.
std::string arm_with_tables(const std::string& spec, const TableChoice& choice, const ModelGeometry* g);
// What an engine needs to run an SJ-KVaRN or KVarN arm: its codec configuration string and its
// trellis tables (the format's, a shipped set's or files', with the codebook id); "" for the
// row formats (their name is the engine's cache type).
// head_dim: the model's, written into the configuration string (0: left as D=0, "the model's").
std::string arm_engine_settings(const std::string& spec, uint32_t head_dim = 0);
// What makes two specs the same arm: for SJ-KVaRN and KVarN arms their configuration, tables and
// options whatever the order they are written in ("sj:4/4:tail=256:staging=q8_0" is
// "sj:4/4:staging=q8_0:tail=256"); a row format's spec as written.
std::string arm_identity(const std::string& spec);

}  // namespace replay
}  // namespace sjkv
