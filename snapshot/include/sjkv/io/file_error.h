// Bad input files: a typed error naming the file and the defect. The CLIs print
// "<tool>: <path>: <defect>" and exit 2.
#pragma once

#include <stdexcept>
#include <string>

namespace sjkv {

class FileError : public std::runtime_error {
 public:
  FileError(std::string path, std::string defect)
      : std::runtime_error(path + ": " + defect), path_(std::move(path)), defect_(std::move(defect)) {}
  const std::string& path() const { return path_; }
  const std::string& defect() const { return defect_; }

 private:
  std::string path_, defect_;
};

}  // namespace sjkv
