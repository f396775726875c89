// A GGUF model's forward pass on the CPU (supported_architectures() lists the GGUF
// architectures; replay/src/model/ has one file each), every hyper-parameter read from the
// file's metadata. K/V go through one LayerKv per layer (kv.h).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "sjkv/io/model_geometry.h"
#include "sjkv/replay/kv.h"

namespace sjkv {
namespace replay {

struct ModelInfo {
  std::string architecture;     // general.architecture: "gemma3", "llama", "qwen3", ...
  std::string file_name;        // base name of the GGUF file
  uint32_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_vocab = 0, n_ff = 0;
  uint64_t n_ctx_train = 0;
  std::vector<LayerShape> layers;  // n_ctx and n_ubatch filled in by the caller
  size_t weight_bytes = 0;         // memory the loaded weights take
};

// The cache geometry the model runs with (the shipped table sets match on it).
inline ModelGeometry geometry_of(const ModelInfo& m) {
  ModelGeometry g;
  g.architecture = m.architecture;
  g.n_layers = m.n_layer;
  g.context_length = m.n_ctx_train;
  g.layers.resize(m.layers.size());
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const LayerShape& s = m.layers[i];
    g.layers[i].kind = s.recurrent        ? LayerKind::recurrent
                       : s.full_attention ? LayerKind::full_attention
                                          : LayerKind::sliding_window;
    g.layers[i].n_head = s.n_head;
    g.layers[i].n_head_kv = s.n_head_kv;
    g.layers[i].head_dim_k = g.layers[i].head_dim_v = s.head_dim;
  }
  return g;
}

struct LoadOptions {
  int n_threads = 0;  // 0: OpenMP's default
  // The longest sequence the caller will run (set_context can change it): Phi-3's long RoPE
  // factors are used above its original context, as llama.cpp picks them by n_ctx.
  // 0: the trained context length.
  uint32_t n_ctx = 0;
};

class Model {
 public:
  // Throws FileError naming the file on a defect (missing tensor, wrong shape, unknown type).
  static std::unique_ptr<Model> load(const std::string& gguf_path, const LoadOptions& opt = {});
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  virtual const GgufFile& gguf() const = 0;
  // The longest sequence the next evaluations will reach (see LoadOptions::n_ctx).
  virtual void set_context(uint32_t /*n_ctx*/) {}

  // Runs tokens [0, n) at positions pos0.. in ubatches of at most n_ubatch, storing into and
  // attending over `kv` (info().n_layer stores). logits: [n][n_vocab] when all_logits, else
  // the last token's [n_vocab]. The same bytes for any thread count.
  void eval(const int32_t* tokens, uint32_t n, uint32_t pos0, uint32_t n_ubatch,
            std::vector<std::unique_ptr<LayerKv>>& kv, float* logits, bool all_logits) {
    eval_hidden(tokens, n, pos0, n_ubatch, kv, nullptr, logits, all_logits);
  }
  // eval that also writes, when `hidden` is not null, the final normed hidden state of the same
  // rows as the logits ([rows][n_embd]): the vector project() turns into those logits. With
  // logits null it writes the hidden states alone (every row's with all_logits), so that a
  // block of many rows need not hold [rows][n_vocab] logits at once.
  virtual void eval_hidden(const int32_t* tokens, uint32_t n, uint32_t pos0, uint32_t n_ubatch,
                           std::vector<std::unique_ptr<LayerKv>>& kv, float* hidden, float* logits,
                           bool all_logits) = 0;
  // The output step alone: logits [rows][n_vocab] from hidden [rows][n_embd] (output matrix,
  // then the final soft-cap if the model has one). eval_hidden computes its logits with this
  // function, so a stored hidden state gives the same bits, for any thread count and rows.
  virtual void project(const float* hidden, uint32_t rows, float* logits) const = 0;

  // The forward pass in two parts, so that work several caches share is done once:
  // eval_prefix runs layers [0, layers) and writes the residual stream after them
  // (x: [n][n_embd]); eval_suffix runs layers [layers, n_layer) from that x. With the same
  // tokens, pos0, n_ubatch and caches, the two give eval_hidden's bits (the same ubatches, the
  // same work per layer). A model without them says so: splits() is false.
  virtual bool splits() const { return false; }
  virtual void eval_prefix(const int32_t*, uint32_t, uint32_t, uint32_t, uint32_t, std::vector<std::unique_ptr<LayerKv>>&,
                           float*) {
    throw std::logic_error("Model::eval_prefix: this model does not split its forward pass");
  }
  virtual void eval_suffix(const float*, uint32_t, uint32_t, uint32_t, uint32_t, std::vector<std::unique_ptr<LayerKv>>&,
                           float*, float*, bool) {
    throw std::logic_error("Model::eval_suffix: this model does not split its forward pass");
  }
};

// The GGUF architectures Model::load accepts, for --help and errors.
std::vector<std::string> supported_architectures();

// The model the tools use without --model: $SJKV_MODEL, else the file scripts/setup links
// into the cache folder ($XDG_CACHE_HOME or ~/.cache)/sjkv/models/. Empty when none is found.
std::string default_model_path();

}  // namespace replay
}  // namespace sjkv
