// Uses each installed library once, so a missing header, an unexported target or a lost usage
// requirement fails to build or link: the codec's grammar and can_implement, a codebook file of
// the package's data (snapshot), the replay's arm grammar, training's record count, the
// cluster's rank and the device switch.
#include <cstdio>
#include <string>

#include "sjkv/cluster.h"
#include "sjkv/config.h"
#include "sjkv/device.h"
#include "sjkv/io/codebook.h"
#include "sjkv/replay/arm_spec.h"
#include "sjkv/train/train.h"

int main() {
  sjkv::CodecConfig c;
  std::string error;
  if (!sjkv::parse_config("sj:3/2t:D=256:tail=512/1024", &c, &error)) {
    std::fprintf(stderr, "parse_config: %s\n", error.c_str());
    return 1;
  }
  const sjkv::Unsupported why = sjkv::can_implement(c);
  if (why != sjkv::Unsupported::none) {
    std::fprintf(stderr, "can_implement: %s\n", sjkv::describe(why));
    return 1;
  }
  const sjkv::CodebookContainer cb = sjkv::read_codebook_any(std::string(SJKV_DATA_DIR) + "/codebooks/gemma3-270m-3bit.sjcb");
  const sjkv::replay::ArmSpec arm = sjkv::replay::ArmSpec::parse("sj:3/2t:tail=512/1024:staging=q8_0");
  const sjkv::Device dev = sjkv::Device::resolve("cpu");
  std::printf("config %s\ncodebook %u-bit id %016llx\narm %s\nrecord sequences %u\nranks %d (mpi %s)\ndevice %s\n",
              c.name().c_str(), cb.table.bits, static_cast<unsigned long long>(cb.codebook_id), arm.to_string().c_str(),
              sjkv::train::sequences_per_record(c), sjkv::cluster::Comm().size(), sjkv::cluster::built_with_mpi() ? "yes" : "no",
              dev.describe().c_str());
  return 0;
}
