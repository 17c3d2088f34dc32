// Exec state: the interpreter of an allowed exec (PT_INTERP of an ELF, the `#!` line of a
// script), remembered per process with the file's identity (device + inode), so that the
// kernel's exec-open of exactly that file, next, by the same process, inside the window and
// from inside a binfmt loader, is judged as part of the program's exec (interpreter_of).
// Read loop only; the counters are read by Watcher.stats().
//
// What is done before the answer and what after: an event's answer waits only for what its
// decision needs. Before answering an allowed exec: the bounded read of its headers (a
// malformed one is engine_error). After answering it: the interpreter's resolution and the
// opening of the process's /proc files (its exec goes on meanwhile; the loop reads the
// interpreter's event only after). Before answering the interpreter's event: an fstat and two
// reads of the /proc files kept open. After it: their close.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace leash {

/** What ReadInterpreter found. */
enum class InterpRead { kNone, kFound, kMalformed };

/**
 * The interpreter the kernel will exec-open after `fd` (an exec event's own descriptor): the
 * PT_INTERP of an ELF or the `#!` line of a script. kNone: nothing (a static binary, a file the
 * kernel runs through no interpreter or refuses); kMalformed: an ELF whose headers cannot be read
 * as the kernel reads them (judged engine_error, never an allow).
 */
InterpRead ReadInterpreter(int fd, std::string* out);

class ExecState {
 public:
  ExecState() = default;
  ExecState(const ExecState&) = delete;
  ExecState& operator=(const ExecState&) = delete;
  ~ExecState() { Close(); }

  /**
   * Before answering an exec event (`fd`, process `pid`, at `nowNs`): is it the kernel loading
   * the interpreter remembered for `pid`? Any exec event of the process ends its entry (used, or
   * stale). On true, program() names the program it serves.
   */
  bool Take(int32_t pid, int fd, int64_t nowNs);

  /**
   * Whether the file the last successful Take served can name an interpreter of its own that the
   * kernel will load: a `#!` or binfmt_misc interpreter can (the kernel runs it as a program); an
   * ELF interpreter cannot (the ELF loader never reads its PT_INTERP).
   */
  bool served_can_chain() const { return servedChains_; }

  /**
   * Before answering an allowed exec of `program` by `pid` (event descriptor `fd`): reads the
   * interpreter the kernel will load for it. False for a malformed header (the exec is then
   * engine_error); true otherwise. What it found is remembered by Commit.
   */
  bool Prepare(int32_t pid, int fd, std::string_view program);

  /**
   * After the answer: remembers what Prepare found (resolved from the process's root, with its
   * /proc files opened for the interpreter's event), and closes what Take finished with.
   */
  void AfterAnswer(int64_t nowNs);

  /** The program served by the last successful Take. */
  const std::string& program() const { return program_; }

  /** Closes every descriptor the table holds. */
  void Close();

  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    dev_t dev;
    ino_t ino;
    int64_t atNs;
    std::string program;
    int statFd;   // /proc/<pid>/stat, opened through the process's own /proc directory
    int stackFd;  // /proc/<pid>/stack
  };
  static constexpr size_t kMax = 1024;
  static constexpr int64_t kTtlNs = 5LL * 1000 * 1000 * 1000;

  std::unordered_map<int32_t, Entry> entries_;
  std::vector<int> retired_;  // descriptors to close after the answer
  struct Pending {
    bool set = false;
    int32_t pid = 0;
    std::string interp;
    std::string program;
  } pending_;
  std::string program_;
  bool servedChains_ = false;
  std::atomic<uint64_t> refused_{0}, dropped_{0};
};

}  // namespace leash
