// Shared by the translation units of _sjkv.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "sjkv/config.h"
#include "sjkv/io/capture.h"

namespace sjkv::pybind {

// parse_config, then can_implement: std::invalid_argument (ValueError) naming the text.
CodecConfig parse_config_checked(const std::string& text);
// std::invalid_argument (ValueError) "NAME must be in [lo, hi] (got V)" outside the range:
// the tools' bounds of the same option.
void check_range(const char* name, long long value, long long lo, long long hi);
// The tools' --threads: 0 (all cores) to 1024.
// Sizes are taken as Python ints of 64 bits and checked here, so that a negative or huge one is
// a ValueError naming it (pybind's own unsigned conversion would raise a TypeError naming none).
inline void check_threads(long long threads) { check_range("threads", threads, 0, 1024); }
// A capture as a dict: k, v (float16 [layers, tokens, kv_heads, head_dim]), layer_ids, ...
pybind11::dict capture_dict(const Capture& c);
// The bindings by concern, one file each: the codec as engines drive it (Cache, Arm), the input
// files beyond snapshots, training, results.
void bind_cache(pybind11::module_& m);
void bind_files(pybind11::module_& m);
void bind_train(pybind11::module_& m);
void bind_results(pybind11::module_& m);

}  // namespace sjkv::pybind
