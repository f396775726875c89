// Trajectory files (docs/FORMAT.md section 9): the token ids of one recorded session (a prompt
// and a generation, or segments of given, generated and answer text with idle steps between
// requests, 9.4) and the reference model's next-token distribution at every scored position,
// kept compactly so that scoring needs no second run of the reference. Two encodings: `hidden` (default)
// keeps the final hidden state, from which the scorer recomputes the exact logits with the
// same model's output step; `sparse` keeps the top logits themselves (no model needed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sjkv/io/atomic_file.h"

namespace sjkv {

// How the reference distribution of one position is kept (FORMAT.md section 9.2): the top
// tokens exactly (their float32 logits), every other token as one "rest" outcome. Scoring
// uses the partition {each kept token, the rest}; a bit-identical logits row scores exactly 0.
struct RefDist {
  double log_z = 0.0;          // log-sum-exp of the full row in double (log_sum_exp below)
  double rest_mass = 0.0;      // probability of the tokens not kept (rest_mass below)
  std::vector<uint32_t> ids;   // kept token ids, strictly ascending
  std::vector<float> logits;   // their logits, exactly as the model produced them
  int32_t top() const;         // the kept id of the largest logit (the lowest id on a tie)
};

// Hidden encoding, one position: the normed final hidden state the output projection
// multiplies, and what the recording run saw, so that a scorer can check its recomputation
// bit for bit and a reader without the model can inspect the file.
struct HiddenRef {
  std::vector<float> hidden;         // [n_embd]
  double log_z = 0.0;                // log_sum_exp of the logits row
  uint64_t logits_hash = 0;          // logits_hash() of the row
  std::vector<uint32_t> top_ids;     // the top tokens, best first (larger logit, then lower id)
  std::vector<float> top_logprobs;   // float(logit - log_z) of each, in the same order
};

enum class RefEncoding { sparse, hidden };
const char* encoding_name(RefEncoding e);  // "sparse", "hidden"
// Throws std::invalid_argument on another name.
RefEncoding parse_encoding(const std::string& name);

// Top tokens the hidden encoding lists per position (fewer when the vocabulary is smaller).
constexpr uint32_t kHiddenTopTokens = 32;

// Largest ubatch a trajectory may record (sjkv-replay's --ubatch range).
constexpr uint32_t kMaxTrajectoryUbatch = 1u << 16;

struct TrajectorySettings {
  uint32_t generate = 0;       // tokens asked for (fewer are recorded after an end-of-generation token)
  bool sample = false;         // false: greedy
  uint64_t seed = 0;
  double temperature = 1.0, top_p = 1.0;
  uint32_t top_k = 0;          // 0: no top-k cut
  std::string reference = "f32";
  uint32_t ubatch = 512;
  uint32_t threads = 0;        // 0: OpenMP's default
  double self_kl_target = 5e-7;  // sparse encoding only
};

// A segment's kind (FORMAT.md 9.4); the value is the code stored in /segments.
enum class SegmentKind : uint8_t {
  given = 0,      // text the user, a tool or the template supplied: prefilled, not scored
  generated = 1,  // the reference's own tokens: decoded one per ubatch, every position scored
  answer = 2,     // given text decoded and scored (a needle's gold answer): not the reference's picks
  idle = 3,       // no token: every layer's idle step (CODEC-SPEC 8.4) with keep_recent
};
constexpr uint32_t kSegmentKinds = 4;
const char* segment_kind_name(SegmentKind k);  // "given", "generated", "answer", "idle"
// Throws std::invalid_argument on another name.
SegmentKind parse_segment_kind(const std::string& name);

struct Segment {
  SegmentKind kind = SegmentKind::given;
  uint32_t length = 0;       // tokens (0 for idle)
  uint32_t keep_recent = 0;  // idle: the idle step's keep_recent; 0 for the other kinds
  bool scored() const { return kind == SegmentKind::generated || kind == SegmentKind::answer; }
  bool operator==(const Segment& o) const {
    return kind == o.kind && length == o.length && keep_recent == o.keep_recent;
  }
  bool operator!=(const Segment& o) const { return !(*this == o); }
};

// Where a transcript recording came from (FORMAT.md 9.1): all five set, or none.
struct TranscriptSource {
  std::string transcript_sha256;     // 64 lower-case hex digits: the transcript file
  std::string chat_template_sha256;  // 64 lower-case hex digits: the template text
  std::string chat_template_source;  // "gguf", or the base name of --chat-template
  std::string template_date;         // YYYY-MM-DD, the date strftime_now saw
  std::string jinja2_version;        // jinja2.__version__ of the renderer
  bool empty() const {
    return transcript_sha256.empty() && chat_template_sha256.empty() && chat_template_source.empty() &&
           template_date.empty() && jinja2_version.empty();
  }
};

// Largest segment count a trajectory may hold (FORMAT.md 9.1).
constexpr uint32_t kMaxTrajectorySegments = 1u << 20;

struct Trajectory {
  std::string model_file;       // base name of the model file
  std::string model_sha256;     // lower-case hex of the whole file
  std::string architecture;
  uint32_t n_vocab = 0;
  uint32_t prompt_tokens = 0;   // the first segment's length (the first scored position, version 2)
  std::vector<int32_t> tokens;  // the whole stream, [n_tokens()]
  TrajectorySettings settings;
  RefEncoding encoding = RefEncoding::hidden;
  // The stream's segments in order. Empty: the version-2 pair [given prompt_tokens][generated
  // generated()], which every version-2 file reads as.
  std::vector<Segment> segments;
  // The context the model was set to while recording (version 3); 0: not stored, the scorer
  // sets prompt_tokens + generate (version 2).
  uint32_t context = 0;
  TranscriptSource source;      // record --transcript's provenance; empty otherwise
  // Position j is the distribution of token scored_positions()[j] (prompt_tokens + j in version
  // 2), given the tokens before it. sparse: ref[j]; hidden: hid[j] (the other vector is empty).
  std::vector<RefDist> ref;
  double self_kl_max = 0.0;     // sparse: largest self_kl() over the recorded positions; hidden: 0
  uint32_t n_embd = 0;          // hidden: the hidden state's length
  std::vector<HiddenRef> hid;

  uint32_t generated() const {
    return static_cast<uint32_t>(encoding == RefEncoding::sparse ? ref.size() : hid.size());
  }
  // The reference's top token at scored position j (the generated token there when greedy).
  int32_t top_token(uint32_t j) const {
    return encoding == RefEncoding::sparse ? ref[j].top() : static_cast<int32_t>(hid[j].top_ids[0]);
  }
  // The segments to run: `segments`, or the version-2 pair when it is empty.
  std::vector<Segment> schedule() const;
  // The absolute position of each scored position j, in stream order ([generated()]).
  std::vector<uint32_t> scored_positions() const;
  // T, the stream's length: the sum of the schedule's lengths (prompt_tokens + generated() in
  // version 2). Caches are made for it.
  uint32_t n_tokens() const;
  // What Model::set_context gets when scoring: `context`, or prompt_tokens + generate when it
  // is 0 (version 2, as score sets it).
  uint32_t n_ctx() const { return context ? context : prompt_tokens + settings.generate; }
  // Whether the writer writes version 2: the schedule is [given prompt_tokens][generated
  // generated()], there is no provenance, and `context` is 0 or the one version 2 implies.
  bool is_version2() const;
  // Throws std::invalid_argument naming the first inconsistency: version 2's rules, and for any
  // other trajectory version 3's (FORMAT.md 9.4).
  void check_consistent() const;
};

// Writes atomically (temp + rename): version 2 when is_version2(), else version 3.
// std::invalid_argument when inconsistent or the zstd level is bad (nothing created);
// FileError when the file cannot be written.
void write_trajectory(const std::string& path, const Trajectory& t, int zstd_level = 3);
// The same into `out`'s temporary, not committed: for outputs committed together (commit_all).
void write_trajectory(AtomicOutput& out, const Trajectory& t, int zstd_level = 3);
// Reads versions 1 to 3 and validates like hostile input; FileError(path, defect). A version-1
// or -2 file has empty `segments` and `context` 0; a version-3 file keeps what it stores.
Trajectory read_trajectory(const std::string& path);

}  // namespace sjkv
