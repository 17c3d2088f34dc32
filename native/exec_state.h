// Exec state: the interpreter of an allowed exec (PT_INTERP of an ELF, the `#!` line of a
// script), remembered per process with the file's identity (device + inode), so that the
// kernel's exec-open of exactly that file, next, by the same process, inside the window and
// from inside a binfmt loader, is judged as part of the program's exec (interpreter_of).
// Read loop only; the counters are read by Watcher.stats().
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

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

  /**
   * Is this exec event (`fd`, process `pid`, at `nowNs`) the kernel loading the interpreter
   * remembered for `pid`? Any exec event of the process ends its entry (used, or stale). On
   * true, program() names the program it serves.
   */
  bool Take(int32_t pid, int fd, int64_t nowNs);

  /**
   * After an allowed exec of `program` by `pid` (event descriptor `fd`): remembers the
   * interpreter the kernel will load for it. False for a malformed header (the exec is then
   * engine_error); true otherwise, whether or not anything was remembered.
   */
  bool Remember(int32_t pid, int fd, std::string_view program, int64_t nowNs);

  /** The program served by the last successful Take. */
  const std::string& program() const { return program_; }

  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    dev_t dev;
    ino_t ino;
    int64_t atNs;
    std::string program;
  };
  static constexpr size_t kMax = 1024;
  static constexpr int64_t kTtlNs = 5LL * 1000 * 1000 * 1000;

  std::unordered_map<int32_t, Entry> entries_;
  std::string program_;
  std::atomic<uint64_t> refused_{0}, dropped_{0};
};

}  // namespace leash
