// The native verdict path's allow lines (issue 43): written here, to the decision log's own file, one write(2) per
// batch of events, instead of handed to JavaScript one call per batch and one write per line. Measured in
// bench/proxy that hand-over was about 30 us of the proxy's CPU per new TLS connection (a sixth of it): the call
// into JavaScript, the line's parse and ref there, and its own write. The bytes are what src/log/decisions.ts's
// writeTail writes for the same tail (ts and ref as decisionHead makes them; tests/integration/
// network-native-verdict.test.ts compares the lines with the JavaScript path's). What JavaScript still needs of
// these connections, it pulls about once a second (fastTake): the counts for the allow tally and the metrics, and
// the set-up times. Blocks, failures and every other record still go to JavaScript at once (onLines).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "acceptor_class.h"
#include "errors.h"

namespace leash {
namespace acceptor {

namespace {
// Set-up times kept between two pulls: a second of connections at any rate this proxy reaches, and a bound.
constexpr size_t kMaxSetups = 1 << 16;
}  // namespace

/** Points the native allow lines at `fd` (a dup is kept: the log may close or replace its own); -1: none. */
bool Acceptor::UseLogFd(int fd) {
  WriteAllows();  // lines decided under the old descriptor belong to its file
  int d = -1;
  if (fd >= 0) {
    d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (d < 0) return false;
  }
  if (logFd_ >= 0) close(logFd_);
  logFd_ = d;
  return true;
}

/** setLogFd(fd): the decision log reopened (rotation): allow lines go to its new descriptor from now on. */
Napi::Value Acceptor::SetLogFd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) return Usage(env, "setLogFd(fd)");
  if (!UseLogFd(info[0].As<Napi::Number>().Int32Value())) ErrnoError(env, errno, "dup").ThrowAsJavaScriptException();
  return env.Undefined();
}

void Acceptor::AllowLine(uint32_t uid, const char* reason, const std::string& tail, double setupUs) {
  Counted& t = tally_[{uid, reason}];
  t.allowed++;
  if (logWrite_) {
    char ref[8];
    refs_.Next(ref);
    const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
    allowOut_.append("{\"ts\":\"", 7);
    iso_.Append(&allowOut_, ms);
    allowOut_.append("\",\"ref\":\"", 9).append(ref, 8).push_back('"');
    allowOut_.append(tail);
    t.written++;
  }
  if (wantSetups_ && setups_.size() < kMaxSetups) setups_.push_back(setupUs / 1e6);
}

/** The batch's allow lines, in one write(2) (O_APPEND: whole lines between the service's and the watcher's). */
void Acceptor::WriteAllows() {
  if (allowOut_.empty()) return;
  const char* p = allowOut_.data();
  size_t left = allowOut_.size();
  while (left > 0 && logFd_ >= 0) {
    ssize_t w = write(logFd_, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      logErrno_ = w < 0 ? errno : EIO;
      break;
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  for (size_t i = allowOut_.size() - left; i < allowOut_.size(); i++)
    if (allowOut_[i] == '\n') logLost_++;
  allowOut_.clear();
}

/**
 * fastTake() -> {tally: [uid, reason, allowed, written][], setups: Float64Array (seconds), errno, lost}: what the
 * native path allowed since the last call, its set-up times, and the last write error with the lines it lost.
 */
Napi::Value Acceptor::FastTake(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  Napi::Array tally = Napi::Array::New(env, tally_.size());
  uint32_t i = 0;
  for (const auto& [key, t] : tally_) {
    Napi::Array row = Napi::Array::New(env, 4);
    row.Set(0u, Napi::Number::New(env, key.first));
    row.Set(1u, Napi::String::New(env, key.second));
    row.Set(2u, Napi::Number::New(env, t.allowed));
    row.Set(3u, Napi::Number::New(env, t.written));
    tally.Set(i++, row);
  }
  tally_.clear();
  Napi::Float64Array setups = Napi::Float64Array::New(env, setups_.size());
  for (size_t k = 0; k < setups_.size(); k++) setups[k] = setups_[k];
  setups_.clear();
  o.Set("tally", tally);
  o.Set("setups", setups);
  o.Set("errno", Napi::Number::New(env, logErrno_));
  o.Set("lost", Napi::Number::New(env, logLost_));
  logErrno_ = 0;
  logLost_ = 0;
  return o;
}

}  // namespace acceptor
}  // namespace leash
