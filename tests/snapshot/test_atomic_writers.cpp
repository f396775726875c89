// Atomic writes from several writers of one process at once (threads of a Python program, two
// device outputs of one command): each writer has its own temporary, every one succeeds, the
// published file is one writer's whole content, and nothing is left behind. And commit_all
// writes its device outputs before it renames any file.

#include <gtest/gtest.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sjkv/io/atomic_file.h"
#include "sjkv/io/capture_file.h"
#include "sjkv/io/paths.h"

#include "file_fixtures.h"

using namespace sjkv;
using namespace sjkv::filetest;

namespace {

// Holds every thread until all have arrived, so that their steps overlap.
class Gate {
 public:
  explicit Gate(size_t n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(m_);
    const size_t round = round_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return round_ != round; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  size_t n_, arrived_ = 0, round_ = 0;
};

std::string content_of(size_t writer, size_t size) {
  std::string s = "writer " + std::to_string(writer) + "\n";
  s.resize(size, static_cast<char>('a' + writer % 26));
  return s;
}

// Files of `dir` named `stem` or `stem`-<anything>.
size_t temps_in(const std::string& dir, const std::string& stem) {
  size_t n = 0;
  for (const std::string& f : list_dir(dir))
    if (f == stem || f.rfind(stem + "-", 0) == 0) ++n;
  return n;
}

// The temporaries of this process for a name in `dir`.
size_t own_temps(const std::string& dir, const std::string& name) {
  return temps_in(dir, "." + name + ".tmp-" + std::to_string(::getpid()));
}

std::string read_all(const std::string& p) {
  const std::vector<uint8_t> b = file_bytes(p);
  return std::string(b.begin(), b.end());
}

// n writers of `p` in lockstep: all hold their temporaries at once, write at once (write(i,
// out)) and publish at once; every thread passes each gate whatever fails. Each writer's
// error ("" when none) and, with `temps`, its temporary's path.
std::vector<std::string> in_lockstep(const std::string& p, size_t n,
                                     const std::function<void(size_t, AtomicOutput&)>& write,
                                     std::vector<std::string>* temps = nullptr) {
  Gate gate(n);
  std::vector<std::string> errors(n);
  if (temps) temps->assign(n, "");
  std::vector<std::thread> th;
  for (size_t i = 0; i < n; ++i)
    th.emplace_back([&, i] {
      std::unique_ptr<AtomicOutput> out;
      try {
        out = std::make_unique<AtomicOutput>(p);
        if (temps) (*temps)[i] = out->temp_path();
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
      gate.arrive_and_wait();
      try {
        if (out) write(i, *out);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
      gate.arrive_and_wait();
      try {
        if (out && errors[i].empty()) out->commit();
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (std::thread& t : th) t.join();
  return errors;
}

// All writers hold their temporaries at once, write at once and publish at once: with one
// shared temporary name they wrote into one file and all but the first rename failed.
TEST(ConcurrentWriters, EachThreadHasItsOwnTemporary) {
  const std::string dir = scratch("threads");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string p = dir + "/one.bin";
  constexpr size_t kThreads = 8;
  std::vector<std::string> temps;
  const std::vector<std::string> errors = in_lockstep(
      p, kThreads,
      [&](size_t i, AtomicOutput& out) {
        const std::string text = content_of(i, 200000 + 1000 * i);
        write_file_bytes(out.temp_path(), text.data(), text.size(), p);
      },
      &temps);
  for (size_t i = 0; i < kThreads; ++i) EXPECT_EQ(errors[i], "") << "writer " << i;
  EXPECT_EQ(std::set<std::string>(temps.begin(), temps.end()).size(), kThreads) << "writers shared a temporary";
  const std::string got = read_all(p);
  bool whole = false;
  for (size_t i = 0; i < kThreads; ++i) whole = whole || got == content_of(i, 200000 + 1000 * i);
  EXPECT_TRUE(whole) << "the published file is no writer's whole content (" << got.size() << " bytes)";
  EXPECT_EQ(own_temps(dir, "one.bin"), 0u);
}

// The same without any order between the threads, many times over.
TEST(ConcurrentWriters, UnorderedWritesAllSucceed) {
  const std::string dir = scratch("unordered");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string p = dir + "/many.bin";
  constexpr size_t kThreads = 12, kRounds = 25;
  std::vector<size_t> failures(kThreads, 0);
  std::vector<std::thread> th;
  for (size_t i = 0; i < kThreads; ++i)
    th.emplace_back([&, i] {
      for (size_t r = 0; r < kRounds; ++r) {
        const std::string text = content_of(i, 20000 + i);
        try {
          write_file_atomic(p, text.data(), text.size());
        } catch (const std::exception&) {
          ++failures[i];
        }
      }
    });
  for (std::thread& t : th) t.join();
  for (size_t i = 0; i < kThreads; ++i) EXPECT_EQ(failures[i], 0u) << "writer " << i;
  const std::string got = read_all(p);
  bool whole = false;
  for (size_t i = 0; i < kThreads; ++i) whole = whole || got == content_of(i, 20000 + i);
  EXPECT_TRUE(whole);
  EXPECT_EQ(own_temps(dir, "many.bin"), 0u);
}

// HDF5 files (as Snapshot.write and write_trajectory from Python threads): every write
// succeeds and the file reads back as one of them.
TEST(ConcurrentWriters, CapturesFromThreads) {
  const std::string dir = scratch("captures");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string p = dir + "/cap.h5";
  constexpr size_t kThreads = 6;
  std::vector<Capture> caps;
  for (size_t i = 0; i < kThreads; ++i) caps.push_back(make_capture(64, 2, 40, {1, 3}, false, 60 + static_cast<int>(i)));
  const std::vector<std::string> errors =
      in_lockstep(p, kThreads, [&](size_t i, AtomicOutput& out) { write_capture(out, caps[i]); });
  for (size_t i = 0; i < kThreads; ++i) EXPECT_EQ(errors[i], "") << "writer " << i;
  Capture got;
  ASSERT_NO_THROW(got = read_capture(p));
  bool one = false;
  for (const Capture& c : caps) one = one || (got.layers.size() == c.layers.size() && got.layers[0].k == c.layers[0].k &&
                                              got.layers[1].v == c.layers[1].v);
  EXPECT_TRUE(one);
  EXPECT_EQ(own_temps(dir, "cap.h5"), 0u);
}

// Two outputs into character devices at once (record -o /dev/null --capture /dev/null): their
// bytes wait in two temporaries, not one.
TEST(ConcurrentWriters, TwoDeviceOutputsOfOneProcess) {
  AtomicOutput a("/dev/null"), b("/dev/null");
  EXPECT_NE(a.temp_path(), b.temp_path());
  write_file_bytes(a.temp_path(), "abc", 3, "/dev/null");
  write_file_bytes(b.temp_path(), "defg", 4, "/dev/null");
  EXPECT_NO_THROW(commit_all({&a, &b}));
  EXPECT_FALSE(exists(a.temp_path()));
  EXPECT_FALSE(exists(b.temp_path()));
}

// A final name that fits NAME_MAX stays writable by a second writer too: its "-N" fits.
TEST(ConcurrentWriters, LongNamesForASecondWriter) {
  const std::string dir = scratch("long");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  for (size_t len : {200u, 228u, 229u, 239u, 250u, 255u}) {
    const std::string p = dir + "/" + std::string(len, 'L');
    {
      AtomicOutput a(p), b(p);
      EXPECT_NE(a.temp_path(), b.temp_path()) << len;
      EXPECT_LE(base_name(a.temp_path()).size(), static_cast<size_t>(NAME_MAX)) << len;
      EXPECT_LE(base_name(b.temp_path()).size(), static_cast<size_t>(NAME_MAX)) << len;
      write_file_bytes(a.temp_path(), "a", 1, p);
      write_file_bytes(b.temp_path(), "b", 1, p);
      EXPECT_NO_THROW(a.commit()) << len;
      EXPECT_NO_THROW(b.commit()) << len;
    }
    EXPECT_EQ(read_all(p), "b") << len;
    ::unlink(p.c_str());
  }
  EXPECT_EQ(list_dir(dir).size(), 0u);
}

// A killed process's second-writer temporaries (".x.tmp-PID-N") are removed by the next
// writer like its first one; a live process's are kept, and so are names of another shape.
TEST(ConcurrentWriters, DeadProcessesSecondTemporariesAreRemoved) {
  const std::string dir = scratch("stale2");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string p = dir + "/s.bin";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    (void)new AtomicOutput(p);  // leaked, as a SIGKILL leaves them
    (void)new AtomicOutput(p);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const std::string stem = ".s.bin.tmp-" + std::to_string(child);
  ASSERT_EQ(temps_in(dir, stem), 2u) << "the child's two writers shared a temporary";
  const std::string live = dir + "/.s.bin.tmp-1-7";  // pid 1 exists
  const std::string odd = dir + "/.s.bin.tmp-" + std::to_string(child) + "-7x";
  std::ofstream(live) << "x";
  std::ofstream(odd) << "x";
  {
    AtomicOutput out(p);
    EXPECT_EQ(temps_in(dir, stem), 1u);  // the odd one only
    EXPECT_FALSE(exists(dir + "/" + stem));
  }
  EXPECT_TRUE(exists(live));
  EXPECT_TRUE(exists(odd));
  ::unlink(live.c_str());
  ::unlink(odd.c_str());
}

// commit_all writes its device outputs first: a device that fails (/dev/full) leaves none of
// the files published, whatever the order of the list.
TEST(CommitAll, DeviceFailureBeforeAnyRename) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "/dev/full not writable";
  const std::string dir = scratch("devfirst");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string p = dir + "/file.bin";
  {
    AtomicOutput file(p), full("/dev/full");
    write_file_bytes(file.temp_path(), "data", 4, p);
    write_file_bytes(full.temp_path(), "data", 4, "/dev/full");
    EXPECT_THROW(commit_all({&file, &full}), FileError);
  }
  EXPECT_FALSE(exists(p)) << "a file was published though the device output failed";
  EXPECT_EQ(list_dir(dir).size(), 0u);
  struct stat st;
  ASSERT_EQ(::stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

}  // namespace
