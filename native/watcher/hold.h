// Held permission events: an open or exec the policy answers `ask` (an ask entry) is not answered
// at once. The read loop keeps its descriptor (the opener stays blocked in open(2)/execve(2)),
// records it here, and passes the question up to JavaScript (drain's `asks`), which asks the
// service's approvals queue. JavaScript's answer (Watcher.answer) is written by the loop thread
// (the exec state and the decision-log queue are the loop's); a hold whose deadline passes
// unanswered is denied by the loop itself (approval_timeout), never allowed. Bounded per subject
// and in total: beyond either an ask is denied at once (approval_limit); with holds off (no
// approver side: no `hold` option) at once too (approval_unavailable).
//
// A held event stays in the in-flight table (takeover.h) until it is answered, so a watcher that
// dies with events held has them denied by its standby (watcher_takeover); a watcher that closes
// denies what it holds (approval_cancelled) before it lets go of the group.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "fsmatch.h"

namespace leash {

/** The `hold` option: bounds and deadlines. max 0 = holds off. */
struct HoldSettings {
  size_t max = 0;
  size_t perSubject = 0;
  int64_t filesystemMs = 10000;
  int64_t commandsMs = 10000;
};

/** One held event: the kernel's descriptor, who asked, what, and when it is denied unanswered. */
struct HeldEvent {
  uint64_t id = 0;
  int fd = -1;
  int32_t pid = 0;
  uint32_t uid = 0;
  bool exec = false;
  bool allow = false;  // the answer, once decided
  int64_t deadlineNs = 0;
  int64_t deadlineWallMs = 0;
  std::string path;
  std::string rule;
};

/**
 * The table of held events and the two mailboxes: questions up (drained by JavaScript) and answers
 * down (written by the loop). Everything under `mu`; `count` and `answers_pending` let the loop
 * skip the lock when there is nothing held.
 */
struct HoldState {
  HoldSettings settings;
  std::mutex mu;
  std::unordered_map<uint64_t, HeldEvent> held;
  std::unordered_map<uint32_t, size_t> perUid;
  std::vector<HeldEvent> asks;     // not yet drained by JavaScript
  std::vector<HeldEvent> answers;  // decided by JavaScript, not yet written by the loop
  uint64_t nextId = 1;
  std::atomic<int> count{0};
  /** The nearest deadline of what is held (a lower bound: answered holds are not taken out of it). */
  std::atomic<int64_t> earliestNs{INT64_MAX};
  std::atomic<bool> answersPending{false};
  std::atomic<uint64_t> total{0}, allowed{0}, denied{0}, expired{0}, limited{0};
};

/**
 * Whether an ask entry covers what the verdict `v` would otherwise do: in a whitelist what it
 * blocks as not_allowed, in a blacklist what it allows as mode_allow (deny wins in both, an allow
 * entry in a whitelist). On true `v` becomes {block, ask_entry, the ask entry}.
 */
bool AskOf(const FsPolicy& p, bool exec, std::string_view subject, MatchVerdict* v);

}  // namespace leash
