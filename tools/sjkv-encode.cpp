// sjkv-encode: argument parsing and calls into the codec library, nothing else.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "sjkv/demo.h"

namespace {

void progress(size_t done, size_t total) {
  std::fprintf(stderr, "\rsealing configurations: %zu/%zu", done, total);
  if (done == total) std::fprintf(stderr, "\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sjkv-encode: SJ-KVaRN snapshots of captured KV caches"};
  app.require_subcommand(1);

  sjkv::DemoOptions demo;
  bool json = false, quiet = false;
  std::string path = "fast";
  auto* d = app.add_subcommand("demo",
                               "Seal generated K/V tiles in every scalar configuration through the staging path "
                               "and print record bytes, bits per value, decode error and seal time");
  d->add_option("--head-dim", demo.head_dims, "Head sizes to run (64, 128, 256, 512)")
      ->check(CLI::IsMember({64u, 128u, 256u, 512u}))
      ->capture_default_str();
  d->add_option("--records", demo.records, "Groups of 128 tokens sealed per configuration")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  d->add_option("--seed", demo.seed, "Seed of the generated tiles")->capture_default_str();
  d->add_option("--threads", demo.threads, "OpenMP threads for sealing (0 = all cores)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  d->add_option("--path", path, "Sealer: fast (widest SIMD) or reference (scalar)")
      ->check(CLI::IsMember({"fast", "reference"}))
      ->capture_default_str();
  d->add_flag("--json", json, "Print JSON instead of a table");
  d->add_flag("-q,--quiet", quiet, "No progress on stderr");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help or the error line
    return rc == 0 ? 0 : 2;      // usage errors exit 2, like every bad input
  }

  if (d->parsed()) {
    demo.path = path == "reference" ? sjkv::SealPath::reference : sjkv::SealPath::fast;
    const auto rows = sjkv::run_demo(demo, quiet ? nullptr : progress);
    std::cout << (json ? sjkv::demo_json(rows) : sjkv::demo_table(rows));
    if (!json)
      std::cout << "\nbody bpv: record bits per value (payload + fp16 scales); stage bpv: the staging rows the "
                   "seal reads;\nrel.rms: decoded rows against the float rows before staging (rotated basis); "
                   "ms/record: one KV head x 128 tokens.\n";
  }
  return 0;
}
