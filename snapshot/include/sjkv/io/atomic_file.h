// Every file sjkv writes goes to a temporary name in the destination folder and is renamed
// over the destination only when complete: a failure or a kill leaves no partial output
// under the final name (a stray ".name.tmp-PID" may remain after a kill; never a half file).
#pragma once

#include <string>

namespace sjkv {

class AtomicOutput {
 public:
  explicit AtomicOutput(std::string final_path);
  ~AtomicOutput();  // removes the temporary file unless commit() succeeded
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  const std::string& temp_path() const { return temp_; }
  const std::string& final_path() const { return final_; }
  // fsyncs the temporary file and renames it over the final path; throws FileError on failure.
  void commit();

 private:
  std::string final_, temp_;
  bool done_ = false;
};

}  // namespace sjkv
