// Runs a fuzz target (LLVMFuzzerTestOneInput) over stored inputs, without libFuzzer: every
// file given, and every regular file of every directory given (sorted, not recursive). This
// is how the corpora run as ordinary tests. A target refuses bad input by catching the
// reader's documented exceptions; an exception that escapes is reported with the input's name
// and fails the run (a crash fails it anyway).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 1;
  }
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (is_dir(arg)) {
      std::vector<std::string> names;
      if (DIR* d = opendir(arg.c_str())) {
        while (const dirent* e = readdir(d)) {
          const std::string p = arg + "/" + e->d_name;
          if (e->d_name[0] != '.' && is_file(p)) names.push_back(p);
        }
        closedir(d);
      }
      std::sort(names.begin(), names.end());
      if (names.empty()) {
        std::fprintf(stderr, "%s: no inputs\n", arg.c_str());
        return 1;
      }
      inputs.insert(inputs.end(), names.begin(), names.end());
    } else if (is_file(arg)) {
      inputs.push_back(arg);
    } else {
      std::fprintf(stderr, "%s: not a file or directory\n", arg.c_str());
      return 1;
    }
  }
  int failures = 0;
  for (const std::string& p : inputs) {
    std::ifstream f(p, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) {
      std::fprintf(stderr, "%s: cannot read\n", p.c_str());
      return 1;
    }
    try {
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "FINDING %s: uncaught %s\n", p.c_str(), e.what());
      ++failures;
    } catch (...) {
      std::fprintf(stderr, "FINDING %s: uncaught non-standard exception\n", p.c_str());
      ++failures;
    }
  }
  std::printf("%zu inputs, %d findings\n", inputs.size(), failures);
  return failures ? 1 : 0;
}
