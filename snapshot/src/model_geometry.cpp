// Model geometry rules: which layers keep a KV cache and their attention shape, from a GGUF
// file's metadata (sjkv/io/model_geometry.h).
#include "sjkv/io/model_geometry.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace sjkv {

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::full_attention: return "full";
    case LayerKind::sliding_window: return "sliding";
    case LayerKind::recurrent: return "recurrent";
    case LayerKind::nextn: return "nextn";
  }
  return "?";
}

std::vector<uint32_t> ModelGeometry::full_attention_layers() const {
  std::vector<uint32_t> v;
  for (uint32_t i = 0; i < layers.size(); ++i)
    if (layers[i].kind == LayerKind::full_attention && layers[i].kv_source < 0) v.push_back(i);
  return v;
}

std::vector<uint32_t> ModelGeometry::recurrent_layers() const {
  std::vector<uint32_t> v;
  for (uint32_t i = 0; i < layers.size(); ++i)
    if (layers[i].kind == LayerKind::recurrent) v.push_back(i);
  return v;
}

uint32_t ModelGeometry::main_layers() const {
  uint32_t n = 0;
  for (const LayerInfo& l : layers) n += l.kind != LayerKind::nextn;
  return n;
}

// The reader bounds every factor (geometry_from_gguf), so none of these overflow: each layer's
// conv and delta values fit in 32 bits.
uint64_t RecurrentShape::conv_dim() const {
  return 2ull * group_count * state_size + inner_size;
}
uint64_t RecurrentShape::conv_values() const { return conv_kernel ? (conv_kernel - 1ull) * conv_dim() : 0; }
uint64_t RecurrentShape::delta_values() const { return static_cast<uint64_t>(state_size) * inner_size; }

uint64_t ModelGeometry::recurrent_state_values() const {
  if (!recurrent.known()) return 0;
  // At most 65,536 layers x 2 x 2^32 values: no overflow.
  return recurrent_layers().size() * (recurrent.conv_values() + recurrent.delta_values());
}

uint64_t ModelGeometry::recurrent_state_bytes(uint32_t bits_per_value) const {
  if (bits_per_value == 0 || bits_per_value > 64)
    throw std::invalid_argument("recurrent state width " + std::to_string(bits_per_value) + " bits is outside 1..64");
  const uint64_t v = recurrent_state_values();  // < 2^49, so v x 64 fits
  return (v * bits_per_value + 7) / 8;
}

std::vector<uint32_t> ModelGeometry::sliding_layers() const {
  std::vector<uint32_t> v;
  for (uint32_t i = 0; i < layers.size(); ++i)
    if (layers[i].kind == LayerKind::sliding_window && layers[i].kv_source < 0) v.push_back(i);
  return v;
}

uint64_t ModelGeometry::sliding_values_per_cell() const {
  uint64_t v = 0;
  for (uint32_t i : sliding_layers())
    v += static_cast<uint64_t>(layers[i].n_head_kv) * (layers[i].head_dim_k + layers[i].head_dim_v);
  return v;
}

uint64_t ModelGeometry::sliding_cells(uint64_t n_ctx, uint32_t n_ubatch) const {
  if (sliding_layers().empty()) return 0;
  const uint64_t want = std::min<uint64_t>(n_ctx, static_cast<uint64_t>(sliding_window) + n_ubatch);
  return (want + 255) / 256 * 256;
}

CacheGeometry ModelGeometry::cache_geometry() const {
  CacheGeometry g;
  for (const LayerInfo& l : layers)
    if (l.kind == LayerKind::full_attention && l.kv_source < 0)
      g.layers.push_back(LayerGeometry{l.n_head_kv, l.head_dim_k, l.head_dim_v});
  return g;
}

namespace {

constexpr uint32_t kMaxLayers = 65536;

class GeometryReader {
 public:
  explicit GeometryReader(const GgufFile& f) : f_(f) {}

  [[noreturn]] void fail(const std::string& d) const { throw FileError(f_.path(), d); }

  std::string key(const std::string& suffix) const { return arch_ + "." + suffix; }

  // A u32-ranged non-negative integer scalar.
  std::optional<uint32_t> opt_u32(const std::string& k) const {
    const GgufValue* v = f_.find(k);
    if (!v) return std::nullopt;
    const std::optional<uint64_t> u = v->is_array() || v->type() == GgufType::boolean ? std::nullopt : v->to_unsigned();
    if (!u || *u > 0xFFFFFFFFull) fail("key '" + k + "' must be a non-negative 32-bit integer");
    return static_cast<uint32_t>(*u);
  }

  // A scalar broadcast to every layer, or an array with one entry per layer.
  std::optional<std::vector<uint32_t>> per_layer(const std::string& k, uint32_t n) const {
    const GgufValue* v = f_.find(k);
    if (!v) return std::nullopt;
    if (!v->is_array()) {
      const std::optional<uint32_t> s = opt_u32(k);
      return std::vector<uint32_t>(n, *s);
    }
    if (v->count() != n)
      fail("key '" + k + "' has " + std::to_string(v->count()) + " entries for " + std::to_string(n) + " layers");
    std::vector<uint32_t> out(n);
    for (uint32_t i = 0; i < n; ++i) {
      const std::optional<uint64_t> u = v->type() == GgufType::boolean ? std::nullopt : v->to_unsigned(i);
      if (!u || *u > 0xFFFFFFFFull) fail("key '" + k + "' entry " + std::to_string(i) + " is not a non-negative 32-bit integer");
      out[i] = static_cast<uint32_t>(*u);
    }
    return out;
  }

  ModelGeometry read() {
    ModelGeometry g;
    const GgufValue* a = f_.find("general.architecture");
    if (!a) fail("missing key 'general.architecture'");
    arch_ = f_.get_string("general.architecture");
    if (arch_.empty()) fail("general.architecture is empty");
    g.architecture = arch_;
    const std::optional<uint32_t> nl = opt_u32(key("block_count"));
    if (!nl) fail("missing key '" + key("block_count") + "'");
    if (*nl == 0 || *nl > kMaxLayers)
      fail("'" + key("block_count") + "' is " + std::to_string(*nl) + "; 1 to 65536 layers are supported");
    const uint32_t n = *nl;
    g.n_layers = n;
    if (const GgufValue* c = f_.find(key("context_length"))) {
      const std::optional<uint64_t> u = c->is_array() ? std::nullopt : c->to_unsigned();
      if (!u) fail("key '" + key("context_length") + "' must be a non-negative integer");
      g.context_length = *u;
    }
    g.sliding_window = opt_u32(key("attention.sliding_window")).value_or(0);
    // llama.cpp's Gemma 2 slides even without the key (n_swa 4096 by default).
    const bool gemma2_default_window = arch_ == "gemma2" && !f_.find(key("attention.sliding_window"));
    if (gemma2_default_window) g.sliding_window = 4096;

    const auto heads = per_layer(key("attention.head_count"), n);
    if (!heads) fail("missing key '" + key("attention.head_count") + "'");
    const std::vector<uint32_t> heads_kv = per_layer(key("attention.head_count_kv"), n).value_or(*heads);
    const std::optional<uint32_t> embd = opt_u32(key("embedding_length"));
    const std::optional<uint32_t> klen = opt_u32(key("attention.key_length"));
    const std::optional<uint32_t> vlen = opt_u32(key("attention.value_length"));
    const std::optional<uint32_t> klen_swa = opt_u32(key("attention.key_length_swa"));
    const std::optional<uint32_t> vlen_swa = opt_u32(key("attention.value_length_swa"));

    // Layer kinds.
    std::vector<LayerKind> kind(n, LayerKind::full_attention);
    std::string rule;
    const uint32_t nextn = opt_u32(key("nextn_predict_layers")).value_or(0);
    if (nextn >= n && nextn > 0)
      fail("'" + key("nextn_predict_layers") + "' is " + std::to_string(nextn) + " of " + std::to_string(n) + " layers");
    const uint32_t n_main = n - nextn;
    for (uint32_t i = n_main; i < n; ++i) kind[i] = LayerKind::nextn;
    if (nextn) rule += "last " + std::to_string(nextn) + " layer(s) are nextn draft blocks; ";

    bool zero_kv = false;
    for (uint32_t i = 0; i < n_main; ++i)
      if (heads_kv[i] == 0) {
        kind[i] = LayerKind::recurrent;
        zero_kv = true;
      }
    if (zero_kv) rule += "layers with head_count_kv 0 are recurrent; ";
    const std::optional<uint32_t> interval = opt_u32(key("full_attention_interval"));
    const bool qwen_hybrid = arch_ == "qwen3next" || arch_ == "qwen35" || arch_ == "qwen35moe";
    const std::string rkey = key("attention.recurrent_layers");
    if (const GgufValue* rv = f_.find(rkey)) {
      // llama.cpp takes this per-layer array before any interval (the Qwen 3.5 converter
      // writes both; docs/design/qwen35.md section 1).
      if (!rv->is_array() || rv->count() != n)
        fail("key '" + rkey + "' must be an array of " + std::to_string(n) + " bools (one per layer)");
      for (uint32_t i = 0; i < n; ++i) {
        const std::optional<uint64_t> u = rv->to_unsigned(i);
        if (!u || *u > 1) fail("key '" + rkey + "' entry " + std::to_string(i) + " is not a bool");
        if (i < n_main && *u == 1) kind[i] = LayerKind::recurrent;
      }
      rule += "recurrent layers from " + rkey + " (per layer); ";
    } else if (interval || qwen_hybrid) {
      const uint32_t p = interval.value_or(4);
      if (p == 0) fail("'" + key("full_attention_interval") + "' is 0");
      for (uint32_t i = 0; i < n_main; ++i)
        if ((i + 1) % p != 0) kind[i] = LayerKind::recurrent;
      rule += "full attention every " + std::to_string(p) + " layers ((il + 1) % " + std::to_string(p) + " == 0" +
              (interval ? ", " + key("full_attention_interval") : ", llama.cpp's default for " + arch_) + "); ";
    }

    std::vector<bool> swa(n, false);
    bool any_swa = false;
    const std::string pkey = key("attention.sliding_window_pattern");
    if (const GgufValue* pv = f_.find(pkey)) {
      // llama.cpp's gemma4 reads the pattern as an array and refuses a period.
      if (arch_ == "gemma4" && !pv->is_array())
        fail("key '" + pkey + "' must be an array of " + std::to_string(n) + " bools (one per layer)");
      if (pv->is_array()) {
        if (pv->count() != n)
          fail("key '" + pkey + "' has " + std::to_string(pv->count()) + " entries for " + std::to_string(n) + " layers");
        for (uint32_t i = 0; i < n; ++i) {
          const std::optional<uint64_t> u = pv->to_unsigned(i);
          if (!u || *u > 1) fail("key '" + pkey + "' entry " + std::to_string(i) + " is not a bool");
          swa[i] = *u == 1;
        }
        rule += "sliding layers from " + pkey + " (per layer); ";
      } else {
        const uint32_t p = *opt_u32(pkey);
        for (uint32_t i = 0; i < n; ++i) swa[i] = p == 0 || i % p < p - 1;
        rule += p == 0 ? "every layer slides (" + pkey + " 0); "
                       : "sliding unless il % " + std::to_string(p) + " == " + std::to_string(p - 1) + " (" + pkey + "); ";
      }
      for (uint32_t i = 0; i < n_main; ++i) any_swa = any_swa || (swa[i] && kind[i] == LayerKind::full_attention);
      if (any_swa && g.sliding_window == 0)
        fail("'" + pkey + "' marks sliding layers but '" + key("attention.sliding_window") + "' is missing or 0");
    } else if (arch_ == "gemma4") {
      fail("missing key '" + pkey + "' (gemma4's sliding layers, one bool per layer)");
    } else if (g.sliding_window > 0) {
      uint32_t p = 0;
      if (arch_ == "gemma3") p = 6;
      else if (arch_ == "gemma2" || arch_ == "gpt-oss") p = 2;
      else if (arch_ == "cohere2") p = 4;
      if (p) {
        for (uint32_t i = 0; i < n; ++i) swa[i] = i % p < p - 1;
        rule += "sliding unless (il + 1) % " + std::to_string(p) + " == 0 (llama.cpp's built-in pattern for " + arch_ +
                (gemma2_default_window ? ", window 4096 by default" : "") + "); ";
      } else {
        // llama.cpp ignores Mistral's declared window in its llama graph and disables Phi-3's.
        if (arch_ == "llama" || arch_ == "phi3")
          rule += "sliding_window set but not applied by llama.cpp's " + arch_ + " graph: every layer has full attention; ";
        else
          rule += "sliding_window set but no pattern known for " + arch_ + ": every attention layer counted as full; ";
      }
    }
    for (uint32_t i = 0; i < n_main; ++i)
      if (swa[i] && kind[i] == LayerKind::full_attention) kind[i] = LayerKind::sliding_window;
    if (qwen_hybrid && std::count(kind.begin(), kind.end(), LayerKind::recurrent) > 0)
      g.recurrent = recurrent_shape();
    const uint32_t shared = arch_ == "gemma4" ? opt_u32(key("attention.shared_kv_layers")).value_or(0) : 0;
    if (shared) rule += "the last " + std::to_string(shared) + " layers read the KV of the last own-KV layer of their kind (" +
                        key("attention.shared_kv_layers") + "); ";
    g.hybrid_memory = qwen_hybrid;
    g.state_cell_ext = arch_ == "qwen35" || arch_ == "qwen35moe";  // iM-RoPE (llama.cpp's rope type)
    if (rule.empty()) rule = "every layer has full attention; ";
    rule.resize(rule.size() - 2);
    g.layer_rule = rule;

    g.layers.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      LayerInfo& l = g.layers[i];
      l.kind = kind[i];
      l.n_head = (*heads)[i];
      l.n_head_kv = heads_kv[i];
      if (l.kind == LayerKind::recurrent) continue;
      const bool sl = l.kind == LayerKind::sliding_window;
      std::optional<uint32_t> dk = sl && klen_swa ? klen_swa : klen;
      std::optional<uint32_t> dv = sl && vlen_swa ? vlen_swa : vlen;
      if (!dk || !dv) {
        if (!embd || l.n_head == 0)
          fail("layer " + std::to_string(i) + ": no '" + key("attention.key_length") + "' and no embedding_length / head_count to derive it");
        if (*embd % l.n_head != 0)
          fail("layer " + std::to_string(i) + ": embedding_length " + std::to_string(*embd) +
               " is not a multiple of head_count " + std::to_string(l.n_head));
        if (!dk) dk = *embd / l.n_head;
        if (!dv) dv = *embd / l.n_head;
      }
      l.head_dim_k = *dk;
      l.head_dim_v = *dv;
      if (l.kind == LayerKind::full_attention && (l.n_head_kv == 0 || l.head_dim_k == 0 || l.head_dim_v == 0))
        fail("layer " + std::to_string(i) + ": a full-attention layer needs kv heads and head_dim > 0");
      if (l.n_head_kv > l.n_head && l.n_head > 0)
        fail("layer " + std::to_string(i) + ": head_count_kv " + std::to_string(l.n_head_kv) + " exceeds head_count " +
             std::to_string(l.n_head));
      // Grouped-query attention shares each KV head among a whole number of query heads.
      const bool attention = l.kind == LayerKind::full_attention || l.kind == LayerKind::sliding_window;
      if (attention && l.n_head == 0)
        fail("layer " + std::to_string(i) + ": head_count is 0 (head_count_kv " + std::to_string(l.n_head_kv) + ")");
      if (attention && l.n_head % l.n_head_kv != 0)
        fail("layer " + std::to_string(i) + ": head_count " + std::to_string(l.n_head) +
             " is not a multiple of head_count_kv " + std::to_string(l.n_head_kv));
    }
    if (shared) {
      // llama.cpp maps a shared layer to K0 - 2 if it slides, else K0 - 1, and views that cache
      // with the shared layer's own shape: anything else fails there.
      if (shared > n - 2)
        fail("'" + key("attention.shared_kv_layers") + "' is " + std::to_string(shared) + " of " + std::to_string(n) +
             " layers; at least 2 must keep their own KV");
      const uint32_t k0 = n - shared;
      for (uint32_t i = k0; i < n; ++i) {
        LayerInfo& l = g.layers[i];
        const bool sl = l.kind == LayerKind::sliding_window;
        const uint32_t src = sl ? k0 - 2 : k0 - 1;
        const LayerInfo& s = g.layers[src];
        if (s.kind != l.kind || s.n_head_kv != l.n_head_kv || s.head_dim_k != l.head_dim_k || s.head_dim_v != l.head_dim_v)
          fail("shared-KV layer " + std::to_string(i) + " (" + layer_kind_name(l.kind) + ") would read layer " +
               std::to_string(src) + ", which is " + layer_kind_name(s.kind) + " or of another shape");
        l.kv_source = static_cast<int32_t>(src);
      }
    }
    return g;
  }

  // The Gated DeltaNet state shape (RecurrentShape), every key required as llama.cpp requires it.
  RecurrentShape recurrent_shape() const {
    const auto need = [&](const char* suffix) {
      const std::optional<uint32_t> v = opt_u32(key(suffix));
      if (!v) fail("missing key '" + key(suffix) + "' (the recurrent layers' state shape)");
      if (*v == 0) fail("'" + key(suffix) + "' is 0");
      return *v;
    };
    RecurrentShape r;
    r.conv_kernel = need("ssm.conv_kernel");
    r.inner_size = need("ssm.inner_size");
    r.state_size = need("ssm.state_size");
    r.time_step_rank = need("ssm.time_step_rank");
    r.group_count = need("ssm.group_count");
    if (r.conv_kernel < 2)
      fail("'" + key("ssm.conv_kernel") + "' is 1; the conv state keeps conv_kernel - 1 inputs, so at least 2");
    if (static_cast<uint64_t>(r.time_step_rank) * r.state_size != r.inner_size)
      fail("'" + key("ssm.inner_size") + "' is " + std::to_string(r.inner_size) + ", not ssm.time_step_rank " +
           std::to_string(r.time_step_rank) + " x ssm.state_size " + std::to_string(r.state_size));
    // llama.cpp sizes each layer's rows in 32 bits (n_embd_r, n_embd_s). Every factor is below
    // 2^32, so each product below fits in 64 bits before it is compared.
    constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
    const uint64_t key_values = static_cast<uint64_t>(r.group_count) * r.state_size;
    const uint64_t conv_dim = key_values > kMax ? kMax + 1 : 2 * key_values + r.inner_size;
    if (conv_dim > kMax || (r.conv_kernel - 1ull) * conv_dim > kMax)
      fail("the recurrent conv state ((ssm.conv_kernel - 1) x (2 x ssm.group_count x ssm.state_size + "
           "ssm.inner_size) = (" + std::to_string(r.conv_kernel) + " - 1) x (2 x " + std::to_string(r.group_count) +
           " x " + std::to_string(r.state_size) + " + " + std::to_string(r.inner_size) + ")) exceeds 2^32 - 1 values");
    if (static_cast<uint64_t>(r.state_size) * r.inner_size > kMax)
      fail("the recurrent delta state (ssm.state_size x ssm.inner_size = " + std::to_string(r.state_size) + " x " +
           std::to_string(r.inner_size) + ") exceeds 2^32 - 1 values");
    return r;
  }

 private:
  const GgufFile& f_;
  std::string arch_;
};

}  // namespace

ModelGeometry geometry_from_gguf(const GgufFile& f) { return GeometryReader(f).read(); }

namespace {

struct SupportedArch {
  const char* name;
  bool forward;    // sjkv-replay runs it (replay/src/model/arch_*.cpp)
  bool recurrent;  // has layers without a KV cache
};
constexpr SupportedArch kSupported[] = {
    {"gemma2", true, false},     {"gemma3", true, false},    {"llama", true, false},
    {"phi3", true, false},       {"qwen2", true, false},     {"qwen3", true, false},
    {"qwen3moe", true, false},   {"cohere2", false, false},  {"qwen35", true, true},
    {"qwen35moe", true, true},
    {"qwen3next", false, true},  {"gemma4", true, false},   {"gpt-oss", true, false},
};

}  // namespace

std::vector<std::string> supported_architectures(ModelUse use) {
  std::vector<std::string> out;
  for (const SupportedArch& a : kSupported)
    if (a.forward || use == ModelUse::geometry) out.push_back(a.name);
  return out;
}

ModelGeometry supported_geometry(const GgufFile& f, ModelUse use) {
  const std::string& arch = f.get_string("general.architecture");
  const SupportedArch* found = nullptr;
  for (const SupportedArch& a : kSupported)
    if (arch == a.name && (a.forward || use == ModelUse::geometry)) found = &a;
  if (!found) {
    std::string names;
    for (const std::string& n : supported_architectures(use)) names += (names.empty() ? "" : ", ") + n;
    throw FileError(f.path(), "architecture '" + arch + "' is not supported (" + names + ")");
  }
  ModelGeometry g = geometry_from_gguf(f);
  for (uint32_t i = 0; i < g.layers.size() && !found->recurrent; ++i)
    if (g.layers[i].kind == LayerKind::recurrent)
      throw FileError(f.path(), "layer " + std::to_string(i) + " has no KV heads (head_count " +
                                    std::to_string(g.layers[i].n_head) + ", head_count_kv " +
                                    std::to_string(g.layers[i].n_head_kv) + "); " + arch + " has no recurrent layers");
  return g;
}

}  // namespace sjkv
