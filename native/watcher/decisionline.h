// Decision-log lines for the fanotify watcher, formatted natively.
//
// Why: a subject's every open is a decision-log line. Handing each decision to JavaScript
// as an object and formatting it there (an object of 8 properties, JSON.stringify, a Date)
// cost the watcher about 3 µs of CPU per open, more than the path and the match. The loop
// now appends the finished line to its queue and JavaScript writes a drain's lines as one
// buffer. The bytes must be exactly what src/log/decisions.ts formatDecision writes for
// the same decision (tests/native/decision-line.test.ts compares them on generated cases).
#pragma once
#include <napi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fsmatch.h"
#include "jsonline.h"

namespace leash {

/** One decision as the log states it. */
struct DecisionRecord {
  int64_t tsMs = 0;
  const char* ref = nullptr;  // 8 characters (RefPool::Next)
  uint32_t uid = 0;
  bool exec = false;  // the commands surface (an exec), else the filesystem surface (an open)
  bool allow = false;
  bool wouldBlock = false;  // shadow mode: allowed, but the policy would have blocked (action would_block)
  Reason reason = Reason::kEngineError;
  std::string_view subject;               // the path or binary, raw bytes from readlink
  const std::string* rule = nullptr;      // the entry that decided; null for a mode default
  const std::string* program = nullptr;   // exec only: the program whose interpreter this exec loads
  uint64_t inode = 0;                     // hardlinked: the file's inode and link count (nlink 0: not written)
  uint32_t nlink = 0;
};

/**
 * Appends one decision as its log line (with the newline), key order ts, ref, uid, surface,
 * action, reason, subject, rule; `program`, when set on an exec, is written as the subject's
 * `interpreterOf`; `nlink` > 0 adds the subject's `inode` and `nlink` (a hardlinked decision).
 */
void AppendDecisionLine(std::string* out, IsoTime* iso, const DecisionRecord& d);

/**
 * formatDecisionLines(cases) -> {text: Buffer, subjects, rules}: the test hook for the differential
 * test. Each case is {ts, uid, exec, allow, reason, subject: Buffer, rule: string|null, ref};
 * `subjects`/`rules` are the JavaScript strings the structured drain used to make of the same bytes.
 */
Napi::Value FormatDecisionLines(const Napi::CallbackInfo& info);

}  // namespace leash
