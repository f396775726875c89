// Atomic writes of capture and snapshot files: inconsistent input refused before anything is
// created, failures (a missing folder, a failed rename, a signal, a crash mid-write) leave no
// file behind and the old file intact.

#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sjkv/io/atomic_file.h"

#include "file_fixtures.h"

using namespace sjkv;
using namespace sjkv::filetest;

namespace {

// ---- writers --------------------------------------------------------------------------------

size_t count_temp_files(const std::string& dir) {
  size_t n = 0;
  for (const std::string& f : list_dir(dir))
    if (f.find(".tmp-") != std::string::npos) ++n;
  return n;
}

TEST(Writers, RefuseInconsistentInputAndCreateNothing) {
  const std::string dir = scratch("refuse");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  Capture c = make_capture(64, 2, 10, {1}, false, 30);
  c.layers[0].v[2 * 64 + 5] = 0x7c00;  // +inf
  EXPECT_THROW(write_capture(dir + "/c.h5", c), std::invalid_argument);
  try {
    c.check_consistent();
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layers/1/v: NaN or infinity at token 1, head 0, channel 5"), std::string::npos)
        << e.what();
  }
  Capture d = make_capture(64, 2, 10, {1}, true, 31);
  d.token_ids.pop_back();
  EXPECT_THROW(write_capture(dir + "/d.h5", d), std::invalid_argument);
  Capture e = make_capture(48, 2, 10, {1}, false, 32);
  EXPECT_THROW(write_capture(dir + "/e.h5", e), std::invalid_argument);
  EXPECT_THROW(write_capture(dir + "/f.h5", make_capture(64, 1, 3, {1}, false, 33), 99), std::invalid_argument);

  Snapshot s = base_snapshot();
  s.B_prev = s.B + 16;
  EXPECT_THROW(write_snapshot(dir + "/s.h5", s), std::invalid_argument);
  Snapshot t = base_snapshot();
  t.layers[1].body.pop_back();
  EXPECT_THROW(write_snapshot(dir + "/t.h5", t), std::invalid_argument);
  EmbeddedCodebooks cb;
  Snapshot u = make_snapshot(trellis_spec(), &cb);
  EXPECT_THROW(write_snapshot(dir + "/u.h5", u), std::invalid_argument);  // trellis without codebooks
  u.codebook_id ^= 1;
  EXPECT_THROW(write_snapshot(dir + "/u.h5", u, 3, &cb), std::invalid_argument);
  EXPECT_TRUE(list_dir(dir).empty());
}

TEST(Writers, MissingFolderFailsCleanly) {
  const std::string p = scratch("no-such-folder/out.h5");
  try {
    write_capture(p, base_capture());
    ADD_FAILURE() << "wrote into a missing folder";
  } catch (const FileError& e) {
    EXPECT_EQ(e.path(), p);
    EXPECT_NE(e.defect().find("the folder " + scratch("no-such-folder") + " does not exist"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(exists(scratch("no-such-folder")));
}

TEST(Writers, FailedRenameLeavesNothing) {
  const std::string dir = scratch("rename");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string target = dir + "/out.h5";
  ASSERT_EQ(::mkdir(target.c_str(), 0755), 0);  // a folder where the file should go
  ASSERT_EQ(::mkdir((target + "/x").c_str(), 0755), 0);
  EXPECT_THROW(write_snapshot(target, base_snapshot()), FileError);
  EXPECT_EQ(count_temp_files(dir), 0u);
  struct stat st;
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

// A write that fails half way (the file size limit hit while HDF5 writes) leaves neither a
// partial file nor the temporary, and an existing file under the name is untouched.
TEST(Writers, FailureMidWriteLeavesOldFileIntact) {
  const std::string dir = scratch("midwrite");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string target = dir + "/cap.h5";
  write_capture(target, base_capture());
  const std::vector<uint8_t> before = file_bytes(target);
  const Capture big = make_capture(256, 8, 600, {0, 1, 2}, false, 40);  // ~15 MiB of fp16
  fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {256 * 1024, 256 * 1024};
    setrlimit(RLIMIT_FSIZE, &rl);
    int code = 10;
    try {
      write_capture(target, big, 1);
      code = 11;  // should not succeed
    } catch (const FileError&) {
      code = 0;
    } catch (...) {
      code = 12;
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: no exception, 11: write succeeded, 12: not a FileError";
  EXPECT_EQ(count_temp_files(dir), 0u);
  EXPECT_TRUE(file_bytes(target) == before);
  EXPECT_NO_THROW((void)read_capture(target));
}

TEST(Writers, ReplacesExistingFile) {
  const std::string p = scratch("replace.h5");
  write_capture(p, make_capture(64, 1, 5, {1}, false, 50));
  const Capture c = make_capture(32, 2, 7, {4, 2}, true, 51);
  write_capture(p, c);
  expect_same_capture(c, read_capture(p));
}

TEST(AtomicOutput, UncommittedIsRemoved) {
  const std::string p = scratch("atomic.bin");
  std::string temp;
  {
    AtomicOutput out(p);
    temp = out.temp_path();
    EXPECT_EQ(temp, scratch(".atomic.bin.tmp-" + std::to_string(getpid())));
    EXPECT_TRUE(exists(temp));
  }
  EXPECT_FALSE(exists(temp));
  EXPECT_FALSE(exists(p));
  {
    AtomicOutput out(p);
    std::ofstream(out.temp_path()) << "done";
    out.commit();
  }
  EXPECT_TRUE(exists(p));
  EXPECT_FALSE(exists(temp));
}

// A signal while a temporary exists removes it (the handler AtomicOutput installs), and the
// process still dies of that signal.
TEST(AtomicOutput, SignalRemovesTemporary) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    const std::string p = scratch("atomic-signal.bin");
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      AtomicOutput out(p);
      std::ofstream(out.temp_path()) << "half";
      ::raise(sig);
      _exit(0);  // not reached
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "signal " << sig;
    EXPECT_FALSE(exists(scratch(".atomic-signal.bin.tmp-" + std::to_string(child)))) << "signal " << sig;
    EXPECT_FALSE(exists(p));
  }
}

// After a SIGKILL (here: _exit, no destructor) the temporary stays; the next writer of the
// same name removes it, because its process is gone. A live process's temporary is kept.
TEST(AtomicOutput, NextWriterRemovesDeadProcessesTemporaries) {
  const std::string p = scratch("atomic-stale.bin");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    AtomicOutput* leak = new AtomicOutput(p);
    (void)leak;
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const std::string stale = scratch(".atomic-stale.bin.tmp-" + std::to_string(child));
  ASSERT_TRUE(exists(stale));
  const std::string live = scratch(".atomic-stale.bin.tmp-1");  // pid 1 exists
  std::ofstream(live) << "x";
  const std::string other = scratch(".atomic-stale.bin.tmp-12x");  // not our shape
  std::ofstream(other) << "x";
  {
    AtomicOutput out(p);
    EXPECT_FALSE(exists(stale));
  }
  EXPECT_TRUE(exists(live));
  EXPECT_TRUE(exists(other));
  ::unlink(live.c_str());
  ::unlink(other.c_str());
}

// Destinations that are not regular files: a folder, a FIFO are refused and left as they
// are; a character device is written through and stays a device.
TEST(AtomicOutput, SpecialDestinations) {
  EXPECT_THROW(AtomicOutput{scratch_dir()}, FileError);
  const std::string fifo = scratch("atomic.fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(AtomicOutput{fifo}, FileError);
  struct stat st;
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ::unlink(fifo.c_str());
  EXPECT_THROW(AtomicOutput{scratch("no-such-folder/x.bin")}, FileError);
  {
    AtomicOutput out("/dev/null");
    EXPECT_EQ(out.temp_path().find("/dev/"), std::string::npos);
    write_file_bytes(out.temp_path(), "abc", 3, "/dev/null");
    out.commit();
  }
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  if (::access("/dev/full", W_OK) == 0) {
    AtomicOutput out("/dev/full");
    write_file_bytes(out.temp_path(), "abc", 3, "/dev/full");
    EXPECT_THROW(out.commit(), FileError);  // ENOSPC from the device
    ASSERT_EQ(::stat("/dev/full", &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
  }
}

// A final name that fits NAME_MAX gets a temporary that fits too (the plain suffix would not).
TEST(AtomicOutput, LongNamesStayWritable) {
  const std::string name(250, 'n');
  const std::string p = scratch(name);
  {
    AtomicOutput out(p);
    EXPECT_LE(out.temp_path().size() - scratch("").size(), 255u);
    write_file_bytes(out.temp_path(), "ok", 2, p);
    out.commit();
  }
  EXPECT_TRUE(exists(p));
  ::unlink(p.c_str());
  EXPECT_NE(atomic_temp_name(std::string(250, 'a'), 7), atomic_temp_name(std::string(249, 'a') + "b", 7));
}

TEST(AtomicOutput, SameFileIsByInode) {
  const std::string a = scratch("same-a.bin"), b = scratch("same-b.bin");
  std::ofstream(a) << "x";
  ::unlink(b.c_str());
  ASSERT_EQ(::link(a.c_str(), b.c_str()), 0);
  EXPECT_TRUE(same_file(a, b));
  EXPECT_TRUE(same_file(a, scratch_dir() + "/./same-a.bin"));
  EXPECT_FALSE(same_file(a, scratch("no-such")));
  ::unlink(a.c_str());
  ::unlink(b.c_str());
}

}  // namespace
