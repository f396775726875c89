// Typed results of codec calls. Bad input (a NaN in a tile, an unsupported configuration)
// is the caller's problem and comes back as a Status; broken invariants are bugs and abort.
#pragma once

#include <cstdint>
#include <string>

#include "sjkv/layout.h"

namespace sjkv {

enum class ErrorCode : uint32_t {
  ok = 0,
  non_finite_input,   // NaN or infinity in a seal or staging input: side, token, channel name it
  fp16_overflow,      // a finite input whose stored fp16 value or block scale is infinite
  unsupported,        // configuration rejected by can_implement(); `detail` says why
};

struct Status {
  ErrorCode code = ErrorCode::ok;
  Side side = Side::k;
  uint32_t token = 0;    // position inside the record / row index of the call
  uint32_t channel = 0;  // channel (value index inside the row)
  std::string detail;

  bool ok() const { return code == ErrorCode::ok; }
  std::string message() const;

  static Status at(ErrorCode c, Side s, uint32_t t, uint32_t d) {
    Status st;
    st.code = c;
    st.side = s;
    st.token = t;
    st.channel = d;
    return st;
  }
};

}  // namespace sjkv
