// Shared by the translation units of _sjkv.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "sjkv/config.h"
#include "sjkv/io/capture.h"

namespace sjkv::pybind {

// parse_config, then can_implement: std::invalid_argument (ValueError) naming the text.
CodecConfig parse_config_checked(const std::string& text);
// A capture as a dict: k, v (float16 [layers, tokens, kv_heads, head_dim]), layer_ids, ...
pybind11::dict capture_dict(const Capture& c);
// The sequence cache, the other files, training and results (bind_more.cpp).
void bind_more(pybind11::module_& m);

}  // namespace sjkv::pybind
