// tq5_0 tables (a cache arm's row format; docs/REPLAY.md): the 32 Lloyd-Max levels for N(0, 1/128) and the
// 31 decision thresholds, each the midpoint of its two neighbouring levels, as binary32 bit
// patterns. Computed in double by scripts/gen-tq5-tables.py (Lloyd-Max iteration on the
// Gaussian density to a fixed point, levels scaled by 1/sqrt(128)), rounded to binary32 once;
// the same routine at 64 levels reproduces tq6_0's published centroids (docs/SPEC.md 4.2).
// Generated file: edit the script, not this header.
#pragma once

#include <cstdint>

namespace sjkv {
namespace blockfmt {

// Levels, ascending: -0.288211, -0.237864, -0.204861, -0.179316, ..., 0.237864, 0.288211.
static constexpr uint32_t kTq5CentroidBits[32] = {
    0xbe93905cu, 0xbe739285u, 0xbe51c71fu, 0xbe379e9au, 0xbe21c30bu, 0xbe0ea9f4u,
    0xbdfaf454u, 0xbddb5c2bu, 0xbdbdd99eu, 0xbda1eeffu, 0xbd873efau, 0xbd5b0266u,
    0xbd28f699u, 0xbceff18bu, 0xbc8f67a4u, 0xbbbed63bu, 0x3bbed63bu, 0x3c8f67a4u,
    0x3ceff18bu, 0x3d28f699u, 0x3d5b0266u, 0x3d873efau, 0x3da1eeffu, 0x3dbdd99eu,
    0x3ddb5c2bu, 0x3dfaf454u, 0x3e0ea9f4u, 0x3e21c30bu, 0x3e379e9au, 0x3e51c71fu,
    0x3e739285u, 0x3e93905cu,
};

// Thresholds, ascending; T[15] = 0. Code k covers [T[k-1], T[k]).
static constexpr uint32_t kTq5MidpointBits[31] = {
    0xbe86accfu, 0xbe62acd2u, 0xbe44b2ddu, 0xbe2cb0d2u, 0xbe18367fu, 0xbe06120fu,
    0xbdeb283fu, 0xbdcc9ae4u, 0xbdafe44eu, 0xbd9496fdu, 0xbd74c02du, 0xbd41fc80u,
    0xbd1077afu, 0xbcbfac97u, 0xbc3f1d33u, 0x00000000u, 0x3c3f1d33u, 0x3cbfac97u,
    0x3d1077afu, 0x3d41fc80u, 0x3d74c02du, 0x3d9496fdu, 0x3dafe44eu, 0x3dcc9ae4u,
    0x3deb283fu, 0x3e06120fu, 0x3e18367fu, 0x3e2cb0d2u, 0x3e44b2ddu, 0x3e62acd2u,
    0x3e86accfu,
};

}  // namespace blockfmt
}  // namespace sjkv
