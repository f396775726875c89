#include "byte_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "sjkv/io/paths.h"

namespace sjkv::bin {

InputFile InputFile::open(const std::string& path) {
  InputFile f;
  f.path_ = path;
  const int fd = open_input_file(path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw FileError(path, std::string("cannot stat: ") + std::strerror(e));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    static const uint8_t kNone = 0;
    f.bytes_ = std::shared_ptr<const uint8_t>(&kNone, [](const uint8_t*) {});
    return f;
  }
  void* m = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (m == MAP_FAILED) throw FileError(path, std::string("cannot map: ") + std::strerror(e));
  const size_t len = static_cast<size_t>(size);
  f.bytes_ = std::shared_ptr<const uint8_t>(static_cast<const uint8_t*>(m),
                                            [len](const uint8_t* p) { ::munmap(const_cast<uint8_t*>(p), len); });
  f.size_ = size;
  return f;
}

InputFile InputFile::hold(std::vector<uint8_t> bytes, const std::string& name) {
  InputFile f;
  f.path_ = name;
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  f.size_ = owned->size();
  f.bytes_ = std::shared_ptr<const uint8_t>(owned, owned->data());
  return f;
}

std::vector<uint8_t> read_whole(const std::string& path, size_t limit, const char* what) {
  const int fd = open_input_file(path);
  std::FILE* f = ::fdopen(fd, "rb");
  if (!f) {
    ::close(fd);
    throw FileError(path, std::string("cannot open: ") + std::strerror(errno));
  }
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    out.insert(out.end(), buf, buf + n);
    if (out.size() > limit) {
      std::fclose(f);
      throw FileError(path, "is larger than " + std::to_string(limit) + " bytes; not " + what);
    }
  }
  const bool err = std::ferror(f) != 0;
  std::fclose(f);
  if (err) throw FileError(path, "read error (is it a directory?)");
  return out;
}

}  // namespace sjkv::bin
