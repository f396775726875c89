// Test-only stand-ins for the model loader, tokenizer and arm parser, linked into
// sjkv-replay-fake (never into the library) so that the command line can be tested end to
// end without a GGUF model. A "model file" is any file starting with "tiny-model".
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "sjkv/io/file_error.h"
#include "sjkv/replay/kv.h"
#include "sjkv/replay/model.h"
#include "sjkv/replay/tokenizer.h"
#include "tiny_model.h"

namespace sjkv {
namespace replay {

namespace {
// SJKV_FAKE_OTHER_BUILD=1: the same model file under an engine build whose output step rounds
// one logit differently, for the test of score's check of hidden-encoded references.
class OtherBuildModel : public sjkv_test::TinyModel {
 public:
  using TinyModel::TinyModel;
  void project(const float* hidden, uint32_t rows, float* logits) const override {
    TinyModel::project(hidden, rows, logits);
    for (uint32_t i = 0; i < rows; ++i) {
      float& x = logits[static_cast<size_t>(i) * info().n_vocab + 7];
      x = std::nextafter(x, -INFINITY);
    }
  }
};

// SJKV_FAKE_ALL_SLIDING=1: every layer has a sliding window (nothing a capture could hold).
class AllSlidingModel : public sjkv_test::TinyModel {
 public:
  explicit AllSlidingModel(uint32_t n_vocab) : TinyModel(n_vocab), info_(TinyModel::info()) {
    for (LayerShape& l : info_.layers) {
      l.full_attention = false;
      l.window = 8;
    }
  }
  const ModelInfo& info() const override { return info_; }

 private:
  ModelInfo info_;
};
}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions&) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw FileError(path, "cannot open");
  std::string head(10, '\0');
  f.read(head.data(), 10);
  if (head != "tiny-model") throw FileError(path, "not a tiny test model");
  if (const char* e = std::getenv("SJKV_FAKE_OTHER_BUILD"); e && e[0] == '1') return std::make_unique<OtherBuildModel>(4096);
  if (const char* e = std::getenv("SJKV_FAKE_ALL_SLIDING"); e && e[0] == '1') return std::make_unique<AllSlidingModel>(4096);
  return std::make_unique<sjkv_test::TinyModel>(4096);
}

std::string default_model_path() {
  const char* env = std::getenv("SJKV_MODEL");
  return env ? env : "";
}

namespace {
// Bytes, shifted past the control ids 0..3; BOS is 1.
class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(1);
    for (unsigned char c : text) ids.push_back(4 + c);
    return ids;
  }
  std::string piece(int32_t id) const override { return id >= 4 && id < 260 ? std::string(1, char(id - 4)) : ""; }
  uint32_t n_vocab() const override { return 4096; }
  int32_t bos() const override { return 1; }
  int32_t eos() const override { return -1; }
  bool is_eog(int32_t) const override { return false; }
};
}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile&) { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<KvArm> make_arm(const std::string& spec, const SealerSource&) {
  if (spec == "f32") return std::make_unique<sjkv_test::PlainArm>(false);
  if (spec == "f16") return std::make_unique<sjkv_test::PlainArm>(true);
  throw std::invalid_argument("unknown arm (the test build knows f32 and f16)");
}

std::vector<std::string> arm_examples() { return {"f32", "f16"}; }
std::string arm_with_tables(const std::string& spec, const TableChoice&, const ModelGeometry*) { return spec; }
std::string arm_engine_settings(const std::string&, uint32_t) { return ""; }
std::string arm_identity(const std::string& spec) { return spec; }

}  // namespace replay
}  // namespace sjkv
