// Every file sjkv writes goes to a temporary name in the destination folder and is renamed
// over the destination only when complete: a failure, SIGINT, SIGTERM or SIGHUP leaves no
// partial output under the final name and no temporary (docs/FORMAT.md §1). Each writer has its
// own temporary, also among threads: ".name.tmp-PID", or ".name.tmp-PID-N" when another writer
// of the process holds that. After SIGKILL one may remain; the next writer of that name removes
// those of dead processes.
//
// The destination is checked when the object is made, before any work: a folder, a FIFO, a
// socket or a block device is refused (FileError). A character device (-o /dev/null) is
// written through: the temporary lives in $TMPDIR and its bytes are copied to the device on
// commit, so the device node is never replaced.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sjkv {

class AtomicOutput {
 public:
  explicit AtomicOutput(std::string final_path);
  ~AtomicOutput();  // removes the temporary file unless published
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  const std::string& temp_path() const { return temp_; }
  const std::string& final_path() const { return final_; }
  bool device() const { return device_; }  // a character device, written through on publish
  // prepare() then publish(); throws FileError on failure (the temporary is then removed).
  void commit();
  // fsyncs the temporary file. Separate from publish() so that several outputs can all be
  // made durable before any of them appears (commit_all).
  void prepare();
  // renames the temporary over the final path (or copies it to a character device).
  void publish();

 private:
  std::string final_, temp_;
  bool device_ = false;  // final path is a character device: write through
  bool prepared_ = false, done_ = false;
  int slot_ = -1;  // signal-cleanup registration
};

// The checks AtomicOutput makes of a destination, without creating anything: not a folder or
// a special file other than a character device, in a folder that exists. Throws FileError.
// Tools call it before the long work.
void check_output_path(const std::string& final_path);

// A folder made for a command's outputs (mkdir, unless it exists): removed again, if it is
// still empty, by the destructor unless keep() was called, and on SIGINT, SIGTERM or SIGHUP.
// Throws FileError when it cannot be made or the path is not a folder.
class MadeFolder {
 public:
  explicit MadeFolder(std::string path);
  ~MadeFolder();
  MadeFolder(const MadeFolder&) = delete;
  MadeFolder& operator=(const MadeFolder&) = delete;
  bool made() const { return made_; }
  void keep();

 private:
  std::string path_;
  bool made_ = false, kept_ = false;
  int slot_ = -1;
};

// Commits several outputs as one: every temporary is fsynced and every character-device output
// written (and its close checked) before the first rename, so a failure while writing or
// syncing leaves none of the files, and SIGINT/SIGTERM/SIGHUP are held back during the
// renames. Throws FileError.
void commit_all(const std::vector<AtomicOutput*>& outs);

// Writes `n` bytes to `path` (created or truncated), checking every write and the close.
// Throws FileError naming `name_for_errors`.
void write_file_bytes(const std::string& path, const void* data, size_t n, const std::string& name_for_errors);

// The whole of a small file at once: AtomicOutput, write_file_bytes, commit.
void write_file_atomic(const std::string& path, const void* data, size_t n);

// The temporary-file name AtomicOutput uses for `final_path` in its folder, shortened to fit
// NAME_MAX when the final name is long (exposed for tests); `writer` > 0 is the "-N" of a
// second writer in the process.
std::string atomic_temp_name(const std::string& final_path, long pid, uint32_t writer = 0);

// Whether two paths name the same existing file (device and inode, not spelling).
bool same_file(const std::string& a, const std::string& b);

}  // namespace sjkv
