// The two loops of sjkv-replay, written against the Model and KvArm interfaces: record a
// trajectory with a reference arm, and replay one with another arm, scoring each generated
// position. The prompt goes in ubatches, then one token at a time, as an engine decodes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sjkv/io/capture.h"
#include "sjkv/replay/kv.h"
#include "sjkv/replay/model.h"
#include "sjkv/replay/score.h"
#include "sjkv/replay/reference.h"

namespace sjkv {
namespace replay {

using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

// One LayerKv per layer of the model for a sequence of n_ctx positions.
std::vector<std::unique_ptr<LayerKv>> make_cache(const Model& m, const KvArm& arm, uint32_t n_ctx, uint32_t n_ubatch);

// Bits per value over the full-attention (compressed) layers, weighted by each layer's
// n_head_kv * head_dim; all layers when the model has no full-attention layer. A hybrid's
// recurrent states are charged to those values too: their bytes over the values of the
// positions stored, in both figures (a state takes its size from the first token on).
// With n, the figure one-token decoding reported when n positions were stored (a decoded
// block's rows, LayerKv::bits_at); by default, now.
constexpr uint32_t kAllStored = 0xFFFFFFFFu;
LayerBits cache_bits(const Model& m, const std::vector<std::unique_ptr<LayerKv>>& kv, uint32_t n = kAllStored);

// Draws the next token from `logits` (greedy: argmax, the lowest id on a tie; sampling:
// softmax(logits / temperature) cut to top_k, then to the smallest set of mass >= top_p).
int32_t pick_token(const float* logits, uint32_t n, const TrajectorySettings& s, SplitMix64& rng);

// One segment of a planned recording (record --transcript; FORMAT.md 9.4): given tokens; a
// generated turn of at most settings.generate tokens, ended after an end-of-generation token;
// forced answer tokens, scored; or an idle step with keep_recent.
struct PlannedSegment {
  SegmentKind kind = SegmentKind::given;
  std::vector<int32_t> tokens;  // given, answer
  uint32_t keep_recent = 0;     // idle
};

struct RecordInput {
  std::vector<int32_t> prompt;           // the plan [given prompt][generated] when `plan` is empty
  // Segments to record instead (FORMAT.md 9.4's order rules). A given piece that follows a turn
  // ended by an end-of-generation token loses a first token equal to it: the model's own token
  // stands for the template's marker (a turn stopped by the cap keeps the marker).
  std::vector<PlannedSegment> plan;
  TrajectorySettings settings;           // generate, sampling, reference arm name, ubatch, ...
  std::string model_file, model_sha256;  // copied into the trajectory
  std::function<bool(int32_t)> is_eog;   // stops generation after such a token (may be empty)
  RefEncoding encoding = RefEncoding::hidden;  // how the reference is kept (FORMAT.md 9.2)
};

// Why the model's K/V cannot be captured (it has no full-attention layer, they differ in
// shape, or the capture file's rules refuse their shape: phi3's head size 96), or empty when
// they can; a tool asks before any work.
std::string capture_refusal(const ModelInfo& info);

// Records with `reference`, evaluating as score replays (walk_schedule in run.cpp): given pieces
// in ubatches from the pending token, generated and answer tokens one per ubatch, idle steps
// through every layer. A plan's context (Model::set_context, the caches, `Trajectory::context`)
// is its given and answer tokens plus settings.generate per generated turn. When `capture` is given, it receives the K/V that the model
// stores into its full-attention layers (fp16 bit patterns, as the model hands them over);
// std::invalid_argument with capture_refusal's reason, before any work, when it cannot.
Trajectory record_trajectory(Model& m, const KvArm& reference, const RecordInput& in, Capture* capture = nullptr,
                             const ProgressFn& progress = {});

// The reference logits rows of a hidden-encoded trajectory, recomputed at score time by
// m.project() from the stored hidden states. The constructor checks every position against
// the recording (logits hash, log_z, top tokens, bit for bit) and throws std::invalid_argument
// naming the first position that differs: the output step is not the recording's (another
// engine build or instruction set). Rows are kept when all of them fit in keep_bytes, else
// recomputed (the same bits) when asked. For a sparse trajectory it holds nothing.
// Reference rows kept by default: 1 GiB, 1,024 of Gemma's 262,144-entry rows; beyond it each arm
// projects them again (about as long as its own projection).
constexpr size_t kKeepReferenceBytes = size_t(1) << 30;
class ReferenceRows {
 public:
  ReferenceRows(const Model& m, const Trajectory& t, size_t keep_bytes = kKeepReferenceBytes);
  // Position j's logits row (n_vocab floats), valid until the next call; hidden encoding only.
  const float* row(uint32_t j);
  // Rows j0 .. j0 + n - 1 ([n][n_vocab]), valid until the next call: one projection of n rows
  // when they are not kept (the bits of n single rows).
  const float* rows(uint32_t j0, uint32_t n);

 private:
  const Model& m_;
  const Trajectory& t_;
  void project(uint32_t j0, uint32_t n, float* out);  // rows j0 .. j0 + n - 1 from the stored hidden states
  bool kept_ = false;
  std::vector<float> rows_, hidden_;
};

// Replays t's tokens with `arm`, scoring the generated positions against t's reference (for
// a hidden-encoded trajectory, `ref` when given, else a ReferenceRows made here).
// std::invalid_argument when the model's vocabulary does not match the trajectory's, or the
// model does not reproduce the recorded reference (ReferenceRows).
// `detail`, when given, says whether the arm kept a codec cache (SJ, KVarN) and whether any
// of its layers sealed a group: without one its body was never exercised.
struct ScoreDetail {
  bool codec = false, sealed = false;
};
// How the generated positions are run. By default in blocks between journal events (seals),
// each row the bits of one token per ubatch (docs/REPLAY.md, "Blocked scoring"); stepwise runs
// one token per ubatch, as an engine decodes (the tests' reference for the blocks).
// Where a score's time went, summed over the trajectories and arms it ran (score --profile):
// the given tokens' forward pass, and per scored position the forward pass (stepwise: with its
// output projection), the arm's output projection, the reference's rows, and the comparison
// (KL, top token) with the bits.
struct ScoreProfile {
  uint64_t given_tokens = 0, scored = 0;
  double given_s = 0, forward_s = 0, project_s = 0, reference_s = 0, compare_s = 0;
};
struct ScoreOptions {
  bool stepwise = false;
  ScoreProfile* profile = nullptr;  // when set, the times are added to it
};
// A ReferenceRows for t (nothing for a sparse trajectory), its time added to the profile's
// reference_s when there is one.
std::unique_ptr<ReferenceRows> reference_rows(const Model& m, const Trajectory& t, ScoreProfile* profile);
std::vector<ScoreRow> score_trajectory(Model& m, const KvArm& arm, const Trajectory& t, uint32_t n_ubatch,
                                       const ProgressFn& progress = {}, ReferenceRows* ref = nullptr,
                                       ScoreDetail* detail = nullptr, const ScoreOptions& opt = {});

// score_trajectory for several arms, with the work that does not depend on the arm done once:
// the reference rows, and the layers before the first full-attention layer for the arms that
// store those as plain f16 (KvArm::plain_f16_sliding) when the model splits (Model::splits).
// Each arm's rows are the bits score_trajectory gives it. `done` is called as each arm
// finishes, in the order of `arms`; `progress(a)` gives arm a's progress callback (may be empty).
using ArmDoneFn = std::function<void(size_t arm, std::vector<ScoreRow>&& rows, const ScoreDetail& detail)>;
void score_arms(Model& m, const std::vector<const KvArm*>& arms, const Trajectory& t, uint32_t n_ubatch,
                const ArmDoneFn& done, const std::function<ProgressFn(size_t)>& progress = {},
                ReferenceRows* ref = nullptr, const ScoreOptions& opt = {});

}  // namespace replay
}  // namespace sjkv
