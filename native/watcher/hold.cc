// Held permission events (hold.h): the loop's side (TryHold, ServeAnswers, ExpireHeld) and
// JavaScript's (answer, drain's asks, the stats).
#include "hold.h"

#include <time.h>
#include <unistd.h>

#include <cstdint>

#include "clock.h"
#include "errors.h"
#include "watcher.h"

namespace leash {

bool AskOf(const FsPolicy& p, bool exec, std::string_view subject, MatchVerdict* v) {
  bool wl = exec ? p.cmdWhitelist : p.fsWhitelist;
  if (v->reason != (wl ? Reason::kNotAllowed : Reason::kModeAllow)) return false;
  std::string norm;
  if (!NormalizePath(subject, &norm)) return false;
  const std::string* r = exec ? p.cmdAsk.Find(norm) : p.fsAsk.Find(norm);
  if (!r) return false;
  *v = {false, Reason::kAskEntry, r};
  return true;
}

bool Watcher::TryHold(const fanotify_event_metadata* m, DecisionRecord* decs, int* ndec) {
  int at = askAt_;
  askAt_ = -1;
  // Held only when the ask is all that stands between the event and an allow: one subject asks,
  // every other decision of the event (another of the process's subject UIDs) allows.
  for (int i = 0; i < *ndec; i++)
    if (i != at && !decs[i].allow) return false;
  DecisionRecord& d = decs[at];
  const HoldSettings& s = hold_.settings;
  if (s.max == 0) {
    d.reason = Reason::kApprovalUnavailable;
    return false;
  }
  HeldEvent h;
  {
    std::lock_guard<std::mutex> g(hold_.mu);
    size_t& mine = hold_.perUid[d.uid];
    if (hold_.held.size() >= s.max || mine >= s.perSubject) {
      if (mine == 0) hold_.perUid.erase(d.uid);
      d.reason = Reason::kApprovalLimit;
      hold_.limited.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    mine++;
    h.id = hold_.nextId++;
    h.fd = m->fd;
    h.pid = m->pid;
    h.uid = d.uid;
    h.exec = d.exec;
    int64_t ms = d.exec ? s.commandsMs : s.filesystemMs;
    h.deadlineNs = batchMonoNs_ + ms * 1000000;
    h.deadlineWallMs = batchWallMs_ + ms;
    h.path = std::string(paths_.path());
    h.rule = d.rule ? *d.rule : std::string();
    if (h.deadlineNs < hold_.earliestNs.load(std::memory_order_relaxed))
      hold_.earliestNs.store(h.deadlineNs, std::memory_order_relaxed);
    hold_.held.emplace(h.id, h);
    hold_.asks.push_back(std::move(h));
    hold_.count.store(static_cast<int>(hold_.held.size()), std::memory_order_relaxed);
  }
  hold_.total.fetch_add(1, std::memory_order_relaxed);
  // The ask's decision line is the queue's (action ask); the outcome's is written when it is answered.
  for (int i = at + 1; i < *ndec; i++) decs[i - 1] = decs[i];
  (*ndec)--;
  tsfn_.NonBlockingCall();
  return true;
}

void Watcher::AnswerHeld(HeldEvent& h, bool allow, const Reason* reason) {
  if (allow && h.exec) {
    // An allowed exec under a whitelist with interpreters: what the kernel loads next for it is read
    // now, as for any allowed exec (fanotify_loop.cc Judge); a header that cannot be read is a deny.
    std::shared_ptr<const Snapshot> snap = std::atomic_load(&snap_);
    auto it = snap->subjects.find(h.uid);
    const FsPolicy* pol = it == snap->subjects.end() ? nullptr : it->second.policy.get();
    if (pol && pol->cmdWhitelist && pol->hasInterpreters && !execs_.Prepare(h.pid, h.fd, h.path)) allow = false;
  }
  fanotify_response r{h.fd, static_cast<__u32>(allow ? FAN_ALLOW : FAN_DENY)};
  if (write(respFd_, &r, sizeof r) != static_cast<ssize_t>(sizeof r)) writeErrors_.fetch_add(1, std::memory_order_relaxed);
  inflight_.Clear(h.fd);
  close(h.fd);
  h.fd = -1;
  (allow ? hold_.allowed : hold_.denied).fetch_add(1, std::memory_order_relaxed);
  execs_.AfterAnswer(NowNs());
  if (reason) {
    DecisionRecord d;
    d.uid = h.uid;
    d.exec = h.exec;
    d.allow = false;
    d.reason = *reason;
    d.rule = h.rule.empty() ? nullptr : &h.rule;
    timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    batchWallMs_ = static_cast<int64_t>(wall.tv_sec) * 1000 + wall.tv_nsec / 1000000;
    batchMonoNs_ = NowNs();
    EnqueueAt(&d, 1, h.path);
  }
}

void Watcher::ServeAnswers() {
  std::vector<HeldEvent> todo;
  {
    std::lock_guard<std::mutex> g(hold_.mu);
    todo.swap(hold_.answers);
    hold_.answersPending.store(false, std::memory_order_relaxed);
  }
  for (auto& h : todo) AnswerHeld(h, h.allow, nullptr);
}

void Watcher::ExpireHeld(int64_t nowNs) {
  // One compare per event while events are held; the table is walked only once a deadline may have passed.
  if (nowNs < hold_.earliestNs.load(std::memory_order_relaxed)) return;
  std::vector<HeldEvent> late;
  {
    std::lock_guard<std::mutex> g(hold_.mu);
    int64_t next = INT64_MAX;
    for (auto it = hold_.held.begin(); it != hold_.held.end();) {
      if (it->second.deadlineNs > nowNs) {
        next = it->second.deadlineNs < next ? it->second.deadlineNs : next;
        ++it;
        continue;
      }
      auto pu = hold_.perUid.find(it->second.uid);
      if (pu != hold_.perUid.end() && --pu->second == 0) hold_.perUid.erase(pu);
      late.push_back(std::move(it->second));
      it = hold_.held.erase(it);
    }
    hold_.earliestNs.store(next, std::memory_order_relaxed);
    hold_.count.store(static_cast<int>(hold_.held.size()), std::memory_order_relaxed);
  }
  const Reason why = Reason::kApprovalTimeout;
  for (auto& h : late) {
    hold_.expired.fetch_add(1, std::memory_order_relaxed);
    AnswerHeld(h, false, &why);
  }
}

int Watcher::HoldPollMs(int64_t nowNs) {
  int64_t next = hold_.earliestNs.load(std::memory_order_relaxed);
  if (next == INT64_MAX) return 1000;
  int64_t ms = (next - nowNs) / 1000000 + 1;
  return ms < 0 ? 0 : ms > 1000 ? 1000 : static_cast<int>(ms);
}

void Watcher::ReleaseHeld() {
  ServeAnswers();
  std::vector<HeldEvent> rest;
  {
    std::lock_guard<std::mutex> g(hold_.mu);
    for (auto& [id, h] : hold_.held) rest.push_back(std::move(h));
    hold_.held.clear();
    hold_.perUid.clear();
    hold_.count.store(0, std::memory_order_relaxed);
    hold_.earliestNs.store(INT64_MAX, std::memory_order_relaxed);
  }
  const Reason why = Reason::kApprovalCancelled;
  for (auto& h : rest) AnswerHeld(h, false, &why);
}

/**
 * answer(id, allow) -> boolean: decides a held event (the approvals queue's outcome). False when it
 * is no longer held (its deadline passed, or it was answered already): nothing is written then.
 */
Napi::Value Watcher::Answer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsBoolean()) return Usage(env, "answer(id: number, allow: boolean)");
  uint64_t id = static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value());
  bool allow = info[1].As<Napi::Boolean>().Value();
  {
    std::lock_guard<std::mutex> g(hold_.mu);
    auto it = hold_.held.find(id);
    if (it == hold_.held.end()) return Napi::Boolean::New(env, false);
    auto pu = hold_.perUid.find(it->second.uid);
    if (pu != hold_.perUid.end() && --pu->second == 0) hold_.perUid.erase(pu);
    it->second.allow = allow;
    hold_.answers.push_back(std::move(it->second));
    hold_.held.erase(it);
    hold_.count.store(static_cast<int>(hold_.held.size()), std::memory_order_relaxed);
    hold_.answersPending.store(true, std::memory_order_relaxed);
  }
  // The loop writes it: wake it from its poll (it tells an answer from a stop by stop_).
  if (stopFd_ >= 0) {
    uint64_t one = 1;
    ssize_t ignored = write(stopFd_, &one, sizeof one);
    (void)ignored;
  }
  return Napi::Boolean::New(env, true);
}

void Watcher::DrainAsks(Napi::Env env, Napi::Object out) {
  std::vector<HeldEvent> asks;
  {
    std::lock_guard<std::mutex> g(hold_.mu);
    asks.swap(hold_.asks);
  }
  Napi::Array a = Napi::Array::New(env, asks.size());
  for (size_t i = 0; i < asks.size(); i++) {
    const HeldEvent& h = asks[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("id", Napi::Number::New(env, static_cast<double>(h.id)));
    o.Set("pid", Napi::Number::New(env, h.pid));
    o.Set("uid", Napi::Number::New(env, h.uid));
    o.Set("surface", h.exec ? "commands" : "filesystem");
    o.Set("subject", Napi::String::New(env, h.path));
    o.Set("rule", h.rule.empty() ? env.Null() : Napi::String::New(env, h.rule));
    o.Set("deadline", Napi::Number::New(env, static_cast<double>(h.deadlineWallMs)));
    a.Set(static_cast<uint32_t>(i), o);
  }
  out.Set("asks", a);
}

void Watcher::HoldStats(Napi::Env env, Napi::Object o) {
  auto n = [&](const char* k, uint64_t v) { o.Set(k, Napi::Number::New(env, static_cast<double>(v))); };
  n("held", static_cast<uint64_t>(hold_.count.load(std::memory_order_relaxed)));
  n("heldTotal", hold_.total.load(std::memory_order_relaxed));
  n("heldAllowed", hold_.allowed.load(std::memory_order_relaxed));
  n("heldDenied", hold_.denied.load(std::memory_order_relaxed));
  n("heldExpired", hold_.expired.load(std::memory_order_relaxed));
  n("heldLimited", hold_.limited.load(std::memory_order_relaxed));
}

}  // namespace leash
