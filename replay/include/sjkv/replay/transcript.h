// Agent transcripts (record --transcript; docs/design/agentic.md section 2): rendered by a chat
// template through python/sjkv/chat.py (jinja2, embedded in this library and run as
// `$SJKV_PYTHON -c`), then tokenized into the plan record_trajectory follows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sjkv/io/gguf.h"
#include "sjkv/io/trajectory.h"
#include "sjkv/replay/run.h"
#include "sjkv/replay/tokenizer.h"

namespace sjkv {
namespace replay {

// A template can loop: the renderer is killed after this many seconds.
constexpr int kRenderSeconds = 60;

// The Python that runs the renderer ($SJKV_PYTHON, else python3), and how a refusal names it.
std::string renderer_python();
std::string renderer_name();

struct TranscriptRequest {
  std::string transcript;                     // the transcript file (JSON, OpenAI chat format)
  std::string chat_template;                  // a template file; empty: the GGUF's tokenizer.chat_template
  std::string assistant_turns = "regenerate"; // an assistant message's kind when it names none
};

// A transcript rendered and tokenized: the given and scored pieces in stream order (no idle
// steps yet), and what the trajectory records of where they came from.
struct TranscriptPlan {
  std::string name;                   // the transcript file, as refusals name it
  std::vector<PlannedSegment> plan;   // given, then generated or answer, alternating
  TranscriptSource source;
  uint64_t given = 0, answer = 0;     // tokens (given before the end-of-turn cut)
  uint32_t generated_turns = 0, answer_turns = 0;
  std::vector<std::string> notes;     // to say before recording (text a template wrote before a turn)
  // Tokens the recording may reach: every given and answer token and `generate` per turn.
  uint64_t context(uint32_t generate) const { return given + answer + uint64_t(generate) * generated_turns; }
};

// Renders r.transcript with the chat template and tokenizes the pieces as llama.cpp's chat path
// does: control tokens written in a piece are tokens, and with add_bos_token exactly one BOS
// leads the stream. FileError naming the transcript, the template file, the GGUF or the Python
// for what they refuse; std::invalid_argument (a usage error) when the GGUF has no template and
// r names none. Nothing of the model but its GGUF metadata is needed.
TranscriptPlan plan_transcript(const TranscriptRequest& r, const GgufFile& f, const Tokenizer& tok);

// The plan with an idle step (keep_recent `keep`) after every scored segment that given text
// follows, as a server idles between requests; without `keep`, the plan as it is.
std::vector<PlannedSegment> with_idle_steps(const std::vector<PlannedSegment>& plan, std::optional<uint32_t> keep);

// Why the transcript does not fit the model's training context at `generate` tokens a turn
// (with the numbers), or empty when it fits (or n_train is 0: unknown).
std::string transcript_context_refusal(const TranscriptPlan& tp, uint32_t generate, const std::string& model_path,
                                       uint64_t n_train);

}  // namespace replay
}  // namespace sjkv
