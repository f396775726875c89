// Trajectory files (docs/FORMAT.md section 9).
#include "sjkv/io/trajectory.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

#include "h5util.h"
#include "sjkv/hd.h"
#include "sjkv/io/atomic_file.h"
#include "sjkv/io/file_error.h"

namespace sjkv {

namespace {

constexpr const char* kMagic = "sjkv-trajectory";
// 1: sparse only, no `encoding` attribute; 2: `encoding` sparse or hidden; 3: segments (9.4).
// Version 2 is still written for the one-prompt case, so that its files stay the same bytes.
constexpr uint32_t kVersion = 3;
constexpr uint32_t kMaxEmbd = 65536;
constexpr uint32_t kMaxTopN = 1024;
constexpr uint32_t kMaxVocab = 1u << 24;
// Caps on the counts a file may claim, so that a small crafted file cannot size huge arrays.
constexpr uint32_t kMaxPositions = 1u << 24;
// Kept probabilities plus the rest must sum to 1 within this (they do to ~1e-15 when written).
constexpr double kMassTolerance = 1e-9;

uint64_t f64_bits(double f) {
  uint64_t u;
  std::memcpy(&u, &f, 8);
  return u;
}
double bits_f64(uint64_t u) {
  double f;
  std::memcpy(&f, &u, 8);
  return f;
}

// Why a position's stored form is unusable, or "".
std::string ref_defect(const RefDist& d, uint32_t n_vocab) {
  if (d.ids.empty()) return "keeps no token";
  if (d.ids.size() != d.logits.size()) return "ids and logits differ in length";
  if (d.ids.size() > n_vocab) return "keeps more tokens than the vocabulary has";
  float mx = -INFINITY;
  for (size_t i = 0; i < d.ids.size(); ++i) {
    if (d.ids[i] >= n_vocab)
      return "token id " + std::to_string(d.ids[i]) + " is out of range [0, " + std::to_string(n_vocab) + ")";
    if (i && d.ids[i] <= d.ids[i - 1]) return "token ids are not strictly ascending";
    if (!std::isfinite(d.logits[i])) return "logit of token " + std::to_string(d.ids[i]) + " is not finite";
    mx = std::max(mx, d.logits[i]);
  }
  if (!std::isfinite(d.log_z)) return "log_z is not finite";
  if (d.log_z < static_cast<double>(mx)) return "log_z is below the largest kept logit";
  if (!(d.rest_mass >= 0.0 && d.rest_mass <= 1.0)) return "rest_mass is not in [0, 1]";
  if (d.ids.size() == n_vocab && d.rest_mass != 0.0) return "rest_mass is not 0 although every token is kept";
  double mass = d.rest_mass;
  for (float l : d.logits) mass += std::exp(static_cast<double>(l) - d.log_z);
  if (std::fabs(mass - 1.0) > kMassTolerance)
    return "kept probabilities and rest_mass sum to " + std::to_string(mass) + ", not 1";
  return {};
}

// Why a hidden-encoded position is unusable, or "".
std::string hidden_defect(const HiddenRef& h, uint32_t n_embd, uint32_t n_vocab) {
  if (h.hidden.size() != n_embd) return "hidden state has " + std::to_string(h.hidden.size()) + " values, not n_embd";
  for (size_t i = 0; i < h.hidden.size(); ++i)
    if (!std::isfinite(h.hidden[i])) return "hidden state value " + std::to_string(i) + " is not finite";
  if (!std::isfinite(h.log_z)) return "log_z is not finite";
  if (h.top_ids.empty()) return "lists no top token";
  if (h.top_ids.size() != h.top_logprobs.size()) return "top ids and log-probabilities differ in length";
  if (h.top_ids.size() > std::min(n_vocab, kMaxTopN)) return "lists more top tokens than allowed";
  double mass = 0.0;
  for (size_t i = 0; i < h.top_ids.size(); ++i) {
    if (h.top_ids[i] >= n_vocab)
      return "top token id " + std::to_string(h.top_ids[i]) + " is out of range [0, " + std::to_string(n_vocab) + ")";
    for (size_t k = 0; k < i; ++k)
      if (h.top_ids[k] == h.top_ids[i]) return "top token id " + std::to_string(h.top_ids[i]) + " is listed twice";
    const float lp = h.top_logprobs[i];
    if (!std::isfinite(lp) || lp > 0.0f) return "top log-probability " + std::to_string(i) + " is not finite and <= 0";
    if (i && lp > h.top_logprobs[i - 1]) return "top log-probabilities are not in descending order";
    mass += std::exp(static_cast<double>(lp));
  }
  // Each float32 log-probability is within half an ulp of the exact one.
  if (mass > 1.0 + 1e-5) return "top probabilities sum to " + std::to_string(mass) + ", more than 1";
  return {};
}

// ---- segments and provenance (version 3) ------------------------------------------------------

const char* kind_name(uint32_t code) {
  static const char* const names[kSegmentKinds] = {"given", "generated", "answer", "idle"};
  return code < kSegmentKinds ? names[code] : "unknown";
}

std::string kind_code_defect(size_t i, uint32_t code) {
  if (code < kSegmentKinds) return {};
  return "segment " + std::to_string(i) + ": kind code " + std::to_string(code) +
         " is unknown (0 given, 1 generated, 2 answer, 3 idle)";
}

// Why a segment list cannot be a trajectory of P prompt tokens, G scored positions, T tokens,
// a turn cap `generate` and a context, or "" (FORMAT.md 9.4; the rules in the order listed there).
std::string segments_defect(const std::vector<Segment>& s, uint32_t P, uint64_t G, uint64_t T, uint32_t generate,
                            uint32_t context) {
  if (s.size() < 2 || s.size() > kMaxTrajectorySegments)
    return "holds " + std::to_string(s.size()) + " segments, outside [2, 2^20]";
  const auto code = [&](size_t i) { return static_cast<uint32_t>(s[i].kind); };
  const auto at = [&](size_t i) { return "segment " + std::to_string(i) + " (" + kind_name(code(i)) + ")"; };
  uint64_t sum = 0, scored = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const Segment& g = s[i];
    std::string d = kind_code_defect(i, code(i));
    if (!d.empty()) return d;
    const bool idle = g.kind == SegmentKind::idle;
    if (!idle && g.length == 0) return at(i) + " is empty";
    if (idle && g.length != 0)
      return at(i) + " holds tokens (" + std::to_string(g.length) + "); an idle step holds none";
    if (!idle && g.keep_recent != 0)
      return at(i) + " has keep_recent " + std::to_string(g.keep_recent) + "; only an idle segment has one";
    if (i == 0 && g.kind != SegmentKind::given)
      return std::string("the first segment is ") + kind_name(code(0)) + "; it must be given text";
    if (i > 0 && g.kind == SegmentKind::given && s[i - 1].kind == SegmentKind::given)
      return "segments " + std::to_string(i - 1) + " and " + std::to_string(i) + " are both given (one segment holds them)";
    // A scored segment's first row is the last given token's: after an idle step or another
    // scored segment it would be the row of a token not yet evaluated (a pending token).
    if (i > 0 && g.scored() && s[i - 1].kind != SegmentKind::given)
      return at(i) + " follows " + at(i - 1) + ", not a given segment";
    if (idle && (i + 1 == s.size() || s[i + 1].kind != SegmentKind::given))
      return at(i) + " is not followed by a given segment";
    sum += g.length;
    if (g.scored()) scored += g.length;
  }
  if (!s.back().scored())
    return std::string("the last segment is ") + kind_name(code(s.size() - 1)) + "; it must be generated or answer text";
  if (sum != T) return "segment lengths sum to " + std::to_string(sum) + ", not n_tokens = " + std::to_string(T);
  if (scored != G)
    return "generated and answer segments hold " + std::to_string(scored) + " tokens, not generated = " + std::to_string(G);
  if (s[0].length != P)
    return "prompt_tokens = " + std::to_string(P) + " is not the first segment's length, " + std::to_string(s[0].length);
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i].kind == SegmentKind::generated && s[i].length > generate)
      return at(i) + " holds " + std::to_string(s[i].length) + " tokens, more than generate = " + std::to_string(generate);
  if (context < T) return "context = " + std::to_string(context) + " is less than n_tokens = " + std::to_string(T);
  return {};
}

constexpr const char* kSourceNames[5] = {"transcript_sha256", "chat_template_sha256", "chat_template_source",
                                         "template_date", "jinja2_version"};

// The five fields in the order of kSourceNames.
template <class Source>
auto source_fields(Source& s) {
  return std::array<decltype(&s.transcript_sha256), 5>{&s.transcript_sha256, &s.chat_template_sha256,
                                                        &s.chat_template_source, &s.template_date, &s.jinja2_version};
}

bool is_lower_hex64(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// YYYY-MM-DD with a month 01-12 and a day 01-31 (what strftime's %Y-%m-%d gives).
bool is_date(const std::string& s) {
  if (s.size() != 10 || s[4] != '-' || s[7] != '-') return false;
  for (size_t i : {0u, 1u, 2u, 3u, 5u, 6u, 8u, 9u})
    if (s[i] < '0' || s[i] > '9') return false;
  const int month = (s[5] - '0') * 10 + (s[6] - '0'), day = (s[8] - '0') * 10 + (s[9] - '0');
  return month >= 1 && month <= 12 && day >= 1 && day <= 31;
}

constexpr const char* kAllOrNone =
    " (all five of transcript_sha256, chat_template_sha256, chat_template_source, template_date and jinja2_version, "
    "or none)";

// Why a provenance is unusable, or "". The values are not echoed: they may hold anything.
std::string source_defect(const TranscriptSource& s) {
  if (s.empty()) return {};
  const auto f = source_fields(s);
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i]->empty()) return std::string("provenance is partial: ") + kSourceNames[i] + " is empty" + kAllOrNone;
    const std::string d = h5::string_defect(kSourceNames[i], *f[i]);
    if (!d.empty()) return d;
  }
  if (!is_lower_hex64(s.transcript_sha256)) return "transcript_sha256 is not 64 lower-case hexadecimal digits";
  if (!is_lower_hex64(s.chat_template_sha256)) return "chat_template_sha256 is not 64 lower-case hexadecimal digits";
  if (s.chat_template_source.find('/') != std::string::npos)
    return "chat_template_source is not 'gguf' or a file's base name (it holds a '/')";
  if (!is_date(s.template_date)) return "template_date is not a date YYYY-MM-DD";
  return {};
}

// Per scored position, whether a generated segment holds it (greedy tokens are the reference's
// top there; answer tokens are given text) and its absolute position.
void scored_layout(const std::vector<Segment>& schedule, std::vector<uint32_t>* positions, std::vector<bool>* generated) {
  uint64_t at = 0;
  for (const Segment& g : schedule) {
    if (g.scored())
      for (uint32_t k = 0; k < g.length; ++k) {
        if (positions) positions->push_back(static_cast<uint32_t>(at + k));
        if (generated) generated->push_back(g.kind == SegmentKind::generated);
      }
    at += g.length;
  }
}

std::string settings_defect(const TrajectorySettings& s) {
  if (!(std::isfinite(s.temperature) && s.temperature > 0.0)) return "temperature must be finite and > 0";
  if (!(std::isfinite(s.top_p) && s.top_p > 0.0 && s.top_p <= 1.0)) return "top_p must be in (0, 1]";
  if (s.reference.empty()) return "reference arm is empty";
  if (s.ubatch == 0 || s.ubatch > kMaxTrajectoryUbatch)
    return "ubatch = " + std::to_string(s.ubatch) + " is outside [1, " + std::to_string(kMaxTrajectoryUbatch) + "]";
  if (!(std::isfinite(s.self_kl_target) && s.self_kl_target > 0.0)) return "self_kl_target must be finite and > 0";
  return {};
}

// A scalar float attribute (any HDF5 float type), finite.
double float_attr(const h5::Reader& r, hid_t obj, const char* name) {
  h5::Hid a = r.attr(obj, name, name);
  h5::Hid t(H5Aget_type(a.get()));
  if (!t.valid() || H5Tget_class(t.get()) != H5T_FLOAT) r.fail(std::string("attribute ") + name + ": expected a float");
  h5::Hid s(H5Aget_space(a.get()));
  if (!s.valid() || H5Sget_simple_extent_type(s.get()) != H5S_SCALAR)
    r.fail(std::string("attribute ") + name + ": expected a scalar");
  double v = 0.0;
  if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0)
    r.fail(std::string("cannot read attribute ") + name + ": " + h5::last_error());
  if (!std::isfinite(v)) r.fail(std::string("attribute ") + name + " is not finite");
  return v;
}

// An unsigned integer dataset of exactly `bytes` per element, read as stored.
template <class T>
std::vector<T> read_uint(const h5::Reader& r, hid_t parent, const std::string& name, const std::string& display,
                         const std::vector<uint64_t>& dims, const char* shape) {
  h5::Hid d = r.dataset(parent, name, display, h5::Elem::integer, dims, shape);
  h5::Hid t(H5Dget_type(d.get()));
  if (H5Tget_size(t.get()) != sizeof(T) || H5Tget_sign(t.get()) != H5T_SGN_NONE)
    r.fail("dataset " + display + ": element type is not uint" + std::to_string(8 * sizeof(T)));
  uint64_t n = 1;
  for (uint64_t x : dims) n *= x;  // the reader checked the byte size for overflow
  std::vector<T> out(n);
  if (n) r.read(d.get(), sizeof(T) == 4 ? H5T_NATIVE_UINT32 : H5T_NATIVE_UINT64, out.data(), display);
  return out;
}

}  // namespace

const char* encoding_name(RefEncoding e) { return e == RefEncoding::sparse ? "sparse" : "hidden"; }

RefEncoding parse_encoding(const std::string& name) {
  if (name == "sparse") return RefEncoding::sparse;
  if (name == "hidden") return RefEncoding::hidden;
  throw std::invalid_argument("unknown reference encoding '" + name + "' (sparse, hidden)");
}

int32_t RefDist::top() const {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;  // ids ascend: the first maximum has the lowest id
  return ids.empty() ? -1 : static_cast<int32_t>(ids[best]);
}

const char* segment_kind_name(SegmentKind k) { return kind_name(static_cast<uint32_t>(k)); }

SegmentKind parse_segment_kind(const std::string& name) {
  for (uint32_t c = 0; c < kSegmentKinds; ++c)
    if (name == kind_name(c)) return static_cast<SegmentKind>(c);
  throw std::invalid_argument("unknown segment kind '" + name + "' (given, generated, answer, idle)");
}

std::vector<Segment> Trajectory::schedule() const {
  if (!segments.empty()) return segments;
  return {Segment{SegmentKind::given, prompt_tokens, 0}, Segment{SegmentKind::generated, generated(), 0}};
}

std::vector<uint32_t> Trajectory::scored_positions() const {
  std::vector<uint32_t> out;
  out.reserve(generated());
  scored_layout(schedule(), &out, nullptr);
  return out;
}

uint32_t Trajectory::n_tokens() const {
  uint64_t T = segments.empty() ? static_cast<uint64_t>(prompt_tokens) + generated() : 0;
  for (const Segment& g : segments) T += g.length;
  return static_cast<uint32_t>(std::min<uint64_t>(T, UINT32_MAX));
}

bool Trajectory::is_version2() const {
  if (!source.empty()) return false;
  if (context != 0 && context != static_cast<uint64_t>(prompt_tokens) + settings.generate) return false;
  return segments.empty() || (segments.size() == 2 && segments[0] == Segment{SegmentKind::given, prompt_tokens, 0} &&
                              segments[1] == Segment{SegmentKind::generated, generated(), 0});
}

void Trajectory::check_consistent() const {
  auto bad = [](const std::string& s) { throw std::invalid_argument("trajectory: " + s); };
  for (const auto& [name, s] : {std::pair<const char*, const std::string*>{"model_file", &model_file},
                                {"model_sha256", &model_sha256}, {"architecture", &architecture},
                                {"reference", &settings.reference}}) {
    const std::string d = h5::string_defect(name, *s);
    if (!d.empty()) bad(d);
  }
  if (n_vocab == 0 || n_vocab > kMaxVocab) bad("n_vocab " + std::to_string(n_vocab) + " is out of range [1, 2^24]");
  if (prompt_tokens == 0) bad("the prompt is empty");
  const size_t G = encoding == RefEncoding::sparse ? ref.size() : hid.size();
  if (encoding == RefEncoding::sparse ? !hid.empty() : !ref.empty()) bad("holds positions of both encodings");
  if (G == 0) bad("no generated position");
  const bool v2 = is_version2();
  if (v2) {
    if (prompt_tokens > kMaxPositions || G > kMaxPositions) bad("more than 2^24 prompt or generated positions");
    if (tokens.size() != static_cast<uint64_t>(prompt_tokens) + G)
      bad("token count " + std::to_string(tokens.size()) + " is not prompt_tokens + generated");
  } else {
    if (tokens.size() > kMaxPositions) bad("more than 2^24 tokens");
    if (context > kMaxPositions) bad("context " + std::to_string(context) + " is more than 2^24");
    std::string d = segments_defect(schedule(), prompt_tokens, G, tokens.size(), settings.generate, context);
    if (d.empty()) d = source_defect(source);
    if (!d.empty()) bad(d);
  }
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= n_vocab)
      bad("token " + std::to_string(i) + " = " + std::to_string(tokens[i]) + " is out of the vocabulary");
  std::string d = settings_defect(settings);
  if (!d.empty()) bad(d);
  if (!(std::isfinite(self_kl_max) && self_kl_max >= 0.0)) bad("self_kl_max must be finite and >= 0");
  if (encoding == RefEncoding::hidden && (n_embd == 0 || n_embd > kMaxEmbd))
    bad("n_embd " + std::to_string(n_embd) + " is out of range [1, 65536]");
  std::vector<uint32_t> pos;
  std::vector<bool> gen;
  scored_layout(schedule(), &pos, &gen);
  for (size_t j = 0; j < G; ++j) {
    d = encoding == RefEncoding::sparse ? ref_defect(ref[j], n_vocab) : hidden_defect(hid[j], n_embd, n_vocab);
    if (!d.empty()) bad("reference position " + std::to_string(j) + ": " + d);
    if (encoding == RefEncoding::hidden && hid[j].top_ids.size() != hid[0].top_ids.size())
      bad("reference position " + std::to_string(j) + ": lists another number of top tokens than position 0");
    if (!settings.sample && gen[j] && top_token(static_cast<uint32_t>(j)) != tokens[pos[j]])
      bad("generated token " + std::to_string(j) + " is not the reference's top token (greedy" +
          (v2 ? std::string() : "; position " + std::to_string(pos[j])) + ")");
  }
}

// ---- encoding -------------------------------------------------------------------------------

// ---- file -----------------------------------------------------------------------------------

namespace {

// The file into out's temporary; `t` was checked by the caller.
// Version 2 is written whenever it can hold the trajectory: the version-3 additions go in
// blocks of their own, so that a version-2 file is the same bytes as before they existed.
void write_checked_trajectory(AtomicOutput& out, const Trajectory& t, int zstd_level) {
  const bool v3 = !t.is_version2();
  h5::write_file(out, zstd_level, [&](const h5::Writer& w, hid_t root) {
    w.attr_string(root, "sjkv_format", kMagic);
    w.attr_u32(root, "version", v3 ? 3 : 2);
    w.attr_string(root, "model_file", t.model_file);
    w.attr_string(root, "model_sha256", t.model_sha256);
    w.attr_string(root, "architecture", t.architecture);
    w.attr_u32(root, "n_vocab", t.n_vocab);
    w.attr_u32(root, "prompt_tokens", t.prompt_tokens);
    w.attr_u32(root, "generated", t.generated());
    const TrajectorySettings& s = t.settings;
    w.attr_u32(root, "generate", s.generate);
    w.attr_u8(root, "sample", s.sample ? 1 : 0);
    w.attr_u64(root, "seed", s.seed);
    auto attr_f64 = [&](const char* name, double v) {
      w.attr_raw(root, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, 1, true);
    };
    attr_f64("temperature", s.temperature);
    w.attr_u32(root, "top_k", s.top_k);
    attr_f64("top_p", s.top_p);
    w.attr_string(root, "reference", s.reference);
    w.attr_u32(root, "ubatch", s.ubatch);
    // No "threads": results do not depend on it, and files recorded with different thread
    // counts must be the same bytes (FORMAT.md section 9).
    attr_f64("self_kl_target", s.self_kl_target);
    attr_f64("self_kl_max", t.self_kl_max);
    const std::vector<Segment> segs = t.schedule();
    if (v3) {
      w.attr_u32(root, "n_tokens", static_cast<uint32_t>(t.tokens.size()));
      w.attr_u32(root, "context", t.context);
      w.attr_u32(root, "n_segments", static_cast<uint32_t>(segs.size()));
      if (!t.source.empty()) {
        const auto f = source_fields(t.source);
        for (size_t i = 0; i < f.size(); ++i) w.attr_string(root, kSourceNames[i], *f[i]);
      }
    }
    w.dataset(root, "token_ids", "token_ids", H5T_STD_I32LE, H5T_NATIVE_INT32, 4, {t.tokens.size()}, t.tokens.data(),
              zstd_level);
    if (v3) {
      std::vector<uint32_t> rows;
      for (const Segment& g : segs) rows.insert(rows.end(), {static_cast<uint32_t>(g.kind), g.length, g.keep_recent});
      w.dataset(root, "segments", "segments", H5T_STD_U32LE, H5T_NATIVE_UINT32, 4, {segs.size(), 3}, rows.data(),
                zstd_level);
    }

    w.attr_string(root, "encoding", encoding_name(t.encoding));
    const uint64_t G = t.generated();
    h5::Hid g = w.create_group(root, "reference");
    std::vector<uint64_t> log_z(G);
    if (t.encoding == RefEncoding::sparse) {
      std::vector<uint32_t> kept(G), ids, logits;
      std::vector<uint64_t> rest(G);
      for (size_t j = 0; j < G; ++j) {
        const RefDist& d = t.ref[j];
        kept[j] = static_cast<uint32_t>(d.ids.size());
        log_z[j] = f64_bits(d.log_z);
        rest[j] = f64_bits(d.rest_mass);
        for (size_t i = 0; i < d.ids.size(); ++i) {
          ids.push_back(i ? d.ids[i] - d.ids[i - 1] - 1 : d.ids[0]);  // gaps: small numbers zstd packs well
          logits.push_back(f32_bits(d.logits[i]));
        }
      }
      const uint64_t K = ids.size();
      w.dataset(g.get(), "kept", "reference/kept", H5T_STD_U32LE, H5T_NATIVE_UINT32, 4, {G}, kept.data(), zstd_level);
      w.dataset(g.get(), "rest_mass", "reference/rest_mass", H5T_STD_U64LE, H5T_NATIVE_UINT64, 8, {G}, rest.data(),
                zstd_level);
      w.dataset(g.get(), "ids", "reference/ids", H5T_STD_U32LE, H5T_NATIVE_UINT32, 4, {K}, ids.data(), zstd_level);
      w.dataset(g.get(), "logits", "reference/logits", H5T_STD_U32LE, H5T_NATIVE_UINT32, 4, {K}, logits.data(),
                zstd_level);
    } else {
      const uint64_t E = t.n_embd, N = t.hid[0].top_ids.size();
      w.attr_u32(root, "n_embd", t.n_embd);
      w.attr_u32(root, "top_n", static_cast<uint32_t>(N));
      std::vector<uint32_t> hidden, top_ids, top_lp;
      std::vector<uint64_t> hash(G);
      hidden.reserve(G * E);
      for (size_t j = 0; j < G; ++j) {
        const HiddenRef& h = t.hid[j];
        log_z[j] = f64_bits(h.log_z);
        hash[j] = h.logits_hash;
        for (float x : h.hidden) hidden.push_back(f32_bits(x));
        top_ids.insert(top_ids.end(), h.top_ids.begin(), h.top_ids.end());
        for (float x : h.top_logprobs) top_lp.push_back(f32_bits(x));
      }
      w.dataset(g.get(), "hidden", "reference/hidden", H5T_STD_U32LE, H5T_NATIVE_UINT32, 4, {G, E}, hidden.data(),
                zstd_level);
      w.dataset(g.get(), "logits_hash", "reference/logits_hash", H5T_STD_U64LE, H5T_NATIVE_UINT64, 8, {G}, hash.data(),
                zstd_level);
      w.dataset(g.get(), "top_ids", "reference/top_ids", H5T_STD_U32LE, H5T_NATIVE_UINT32, 4, {G, N}, top_ids.data(),
                zstd_level);
      w.dataset(g.get(), "top_logprobs", "reference/top_logprobs", H5T_STD_U32LE, H5T_NATIVE_UINT32, 4, {G, N},
                top_lp.data(), zstd_level);
    }
    w.dataset(g.get(), "log_z", "reference/log_z", H5T_STD_U64LE, H5T_NATIVE_UINT64, 8, {G}, log_z.data(), zstd_level);
    w.check_status(g.close(), "group reference");
  });
}

}  // namespace

void write_trajectory(const std::string& path, const Trajectory& t, int zstd_level) {
  t.check_consistent();  // before anything is created
  AtomicOutput out(path);
  write_checked_trajectory(out, t, zstd_level);
  out.commit();
}

void write_trajectory(AtomicOutput& out, const Trajectory& t, int zstd_level) {
  t.check_consistent();
  write_checked_trajectory(out, t, zstd_level);
}

Trajectory read_trajectory(const std::string& path) {
  const h5::ReadSession session(path);
  const h5::Reader& r = session.reader();
  const hid_t root = session.root();
  if (!r.has_attr(root, "sjkv_format")) r.fail("not an sjkv file (no sjkv_format attribute)");
  const std::string magic = r.string_attr(root, "sjkv_format", "sjkv_format");
  if (magic != kMagic) r.fail("sjkv_format is '" + magic + "', expected '" + kMagic + "'");
  r.check_version(root, "version", kVersion);
  const uint32_t version = r.u32_attr(root, "version");

  Trajectory t;
  t.model_file = r.string_attr(root, "model_file", "model_file");
  t.model_sha256 = r.string_attr(root, "model_sha256", "model_sha256");
  t.architecture = r.string_attr(root, "architecture", "architecture");
  t.n_vocab = r.u32_attr(root, "n_vocab", 1, kMaxVocab);
  t.prompt_tokens = r.u32_attr(root, "prompt_tokens", 1, kMaxPositions);
  const uint32_t G = r.u32_attr(root, "generated", 1, kMaxPositions);
  TrajectorySettings& s = t.settings;
  s.generate = r.u32_attr(root, "generate");
  s.sample = r.uint_attr(root, "sample", "sample", 0, 1) != 0;
  s.seed = r.uint_attr(root, "seed", "seed", 0, UINT64_MAX);
  s.temperature = float_attr(r, root, "temperature");
  s.top_k = r.u32_attr(root, "top_k");
  s.top_p = float_attr(r, root, "top_p");
  s.reference = r.string_attr(root, "reference", "reference");
  s.ubatch = r.u32_attr(root, "ubatch", 1, kMaxTrajectoryUbatch);
  // Written by earlier versions only; read and bounded, not needed.
  s.threads = H5Aexists(root, "threads") > 0 ? r.u32_attr(root, "threads", 0, 1024) : 0;
  s.self_kl_target = float_attr(r, root, "self_kl_target");
  t.self_kl_max = float_attr(r, root, "self_kl_max");
  std::string defect = settings_defect(s);
  if (!defect.empty()) r.fail(defect);
  if (t.self_kl_max < 0.0) r.fail("self_kl_max is negative");

  uint64_t n_tokens = static_cast<uint64_t>(t.prompt_tokens) + G;
  if (version >= 3) {
    // The segments are checked before anything is sized by them.
    n_tokens = r.u32_attr(root, "n_tokens", 2, kMaxPositions);
    t.context = r.u32_attr(root, "context", 1, kMaxPositions);
    const uint32_t S = r.u32_attr(root, "n_segments", 2, kMaxTrajectorySegments);
    const std::vector<uint32_t> rows = read_uint<uint32_t>(r, root, "segments", "segments", {S, 3}, "[n_segments, 3]");
    t.segments.resize(S);
    for (uint32_t i = 0; i < S; ++i) {
      defect = kind_code_defect(i, rows[3 * i]);
      if (!defect.empty()) r.fail(defect);
      t.segments[i] = Segment{static_cast<SegmentKind>(rows[3 * i]), rows[3 * i + 1], rows[3 * i + 2]};
    }
    defect = segments_defect(t.segments, t.prompt_tokens, G, n_tokens, s.generate, t.context);
    if (!defect.empty()) r.fail(defect);
    const auto f = source_fields(t.source);
    size_t present = 0;
    for (const char* name : kSourceNames) present += r.has_attr(root, name) ? 1 : 0;
    for (size_t i = 0; present && i < f.size(); ++i) {
      if (!r.has_attr(root, kSourceNames[i]))
        r.fail(std::string("provenance is partial: attribute ") + kSourceNames[i] + " is missing" + kAllOrNone);
      *f[i] = r.string_attr(root, kSourceNames[i], kSourceNames[i]);
    }
    defect = source_defect(t.source);
    if (!defect.empty()) r.fail(defect);
  }

  if (!r.has_link(root, "token_ids")) r.fail("dataset token_ids is missing");
  t.tokens = r.token_ids(root, n_tokens, version >= 3 ? "[n_tokens]" : "[prompt_tokens + generated]");
  for (size_t i = 0; i < t.tokens.size(); ++i)
    if (static_cast<uint32_t>(t.tokens[i]) >= t.n_vocab)
      r.fail("token_ids[" + std::to_string(i) + "] = " + std::to_string(t.tokens[i]) + " is out of the vocabulary (n_vocab " +
             std::to_string(t.n_vocab) + ")");

  // Per scored position: its absolute position, and whether greedy picked its token.
  std::vector<uint32_t> pos;
  std::vector<bool> gen;
  scored_layout(version >= 3 ? t.segments
                             : std::vector<Segment>{{SegmentKind::given, t.prompt_tokens, 0}, {SegmentKind::generated, G, 0}},
                &pos, &gen);
  const auto not_top = [&](uint32_t j) {
    r.fail("generated token " + std::to_string(j) + " is not the reference's top token although greedy" +
           (version >= 3 ? " (position " + std::to_string(pos[j]) + ")" : std::string()));
  };

  t.encoding = RefEncoding::sparse;
  if (version >= 2) {
    const std::string enc = r.string_attr(root, "encoding", "encoding");
    if (enc == "hidden") t.encoding = RefEncoding::hidden;
    else if (enc != "sparse") r.fail("encoding is '" + enc + "', expected 'sparse' or 'hidden'");
  }
  h5::Hid g = r.member(root, "reference", "reference", H5I_GROUP);
  const std::vector<uint64_t> log_z = read_uint<uint64_t>(r, g.get(), "log_z", "reference/log_z", {G}, "[generated]");
  if (t.encoding == RefEncoding::hidden) {
    t.n_embd = r.u32_attr(root, "n_embd", 1, kMaxEmbd);
    const uint32_t N = r.u32_attr(root, "top_n", 1, std::min(t.n_vocab, kMaxTopN));
    const uint64_t E = t.n_embd;
    const std::vector<uint32_t> hidden =
        read_uint<uint32_t>(r, g.get(), "hidden", "reference/hidden", {G, E}, "[generated, n_embd]");
    const std::vector<uint64_t> hash =
        read_uint<uint64_t>(r, g.get(), "logits_hash", "reference/logits_hash", {G}, "[generated]");
    const std::vector<uint32_t> top_ids =
        read_uint<uint32_t>(r, g.get(), "top_ids", "reference/top_ids", {G, N}, "[generated, top_n]");
    const std::vector<uint32_t> top_lp =
        read_uint<uint32_t>(r, g.get(), "top_logprobs", "reference/top_logprobs", {G, N}, "[generated, top_n]");
    t.hid.resize(G);
    for (uint32_t j = 0; j < G; ++j) {
      HiddenRef& h = t.hid[j];
      h.hidden.resize(E);
      for (uint64_t i = 0; i < E; ++i) h.hidden[i] = f32_from_bits(hidden[j * E + i]);
      h.log_z = bits_f64(log_z[j]);
      h.logits_hash = hash[j];
      h.top_ids.assign(top_ids.begin() + static_cast<std::ptrdiff_t>(j * N),
                       top_ids.begin() + static_cast<std::ptrdiff_t>((j + 1) * N));
      for (uint32_t i = 0; i < N; ++i) h.top_logprobs.push_back(f32_from_bits(top_lp[static_cast<size_t>(j) * N + i]));
      defect = hidden_defect(h, t.n_embd, t.n_vocab);
      if (!defect.empty()) r.fail("reference position " + std::to_string(j) + ": " + defect);
      if (!s.sample && gen[j] && t.top_token(j) != t.tokens[pos[j]]) not_top(j);
    }
    return t;
  }

  const std::vector<uint32_t> kept = read_uint<uint32_t>(r, g.get(), "kept", "reference/kept", {G}, "[generated]");
  uint64_t K = 0;
  for (uint32_t j = 0; j < G; ++j) {
    if (kept[j] == 0 || kept[j] > t.n_vocab)
      r.fail("reference/kept[" + std::to_string(j) + "] = " + std::to_string(kept[j]) + " is out of range [1, n_vocab]");
    K += kept[j];  // <= 2^32 * 2^24: no overflow
  }
  const std::vector<uint64_t> rest =
      read_uint<uint64_t>(r, g.get(), "rest_mass", "reference/rest_mass", {G}, "[generated]");
  const std::vector<uint32_t> ids = read_uint<uint32_t>(r, g.get(), "ids", "reference/ids", {K}, "[sum of kept]");
  const std::vector<uint32_t> logits =
      read_uint<uint32_t>(r, g.get(), "logits", "reference/logits", {K}, "[sum of kept]");

  t.ref.resize(G);
  uint64_t at = 0;
  for (uint32_t j = 0; j < G; ++j) {
    RefDist& d = t.ref[j];
    d.log_z = bits_f64(log_z[j]);
    d.rest_mass = bits_f64(rest[j]);
    d.ids.resize(kept[j]);
    d.logits.resize(kept[j]);
    uint64_t id = 0;
    for (uint32_t i = 0; i < kept[j]; ++i, ++at) {
      id = i ? id + 1 + ids[at] : ids[at];
      if (id >= t.n_vocab)
        r.fail("reference position " + std::to_string(j) + ": token id " + std::to_string(id) + " is out of range [0, " +
               std::to_string(t.n_vocab) + ")");
      d.ids[i] = static_cast<uint32_t>(id);
      d.logits[i] = f32_from_bits(logits[at]);
    }
    defect = ref_defect(d, t.n_vocab);
    if (!defect.empty()) r.fail("reference position " + std::to_string(j) + ": " + defect);
    if (!s.sample && gen[j] && d.top() != t.tokens[pos[j]]) not_top(j);
  }
  return t;
}

}  // namespace sjkv
