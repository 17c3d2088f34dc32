// The watchdog thread (see watchdog.h): heartbeat ages, the stack dumps, the exit.
#include "watchdog.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>

#include "clock.h"

namespace leash {

namespace {

const char* const kPhaseNames[] = {"idle (poll)", "reading events", "judging a subject event", "answering",
                                   "stopped"};

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string ReadSmallFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > 65536) break;
  }
  close(fd);
  return out;
}

void DumpThreads() {
  std::string out;
  DIR* d = opendir("/proc/self/task");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string base = std::string("/proc/self/task/") + e->d_name;
    std::string comm = ReadSmallFile(base + "/comm");
    if (!comm.empty() && comm.back() == '\n') comm.pop_back();
    std::string stat = ReadSmallFile(base + "/stat");
    size_t rp = stat.rfind(')');
    char state = rp != std::string::npos && rp + 2 < stat.size() ? stat[rp + 2] : '?';
    out += "leash-watcher: thread " + std::string(e->d_name) + " (" + comm + ") state " + state + " wchan " +
           ReadSmallFile(base + "/wchan") + " syscall " + ReadSmallFile(base + "/syscall");
    if (out.back() != '\n') out += "\n";
    std::string ks = ReadSmallFile(base + "/stack");
    if (!ks.empty()) out += ks;
  }
  closedir(d);
  WriteAll(2, out);
}

}  // namespace

void Watchdog::Reset() { loopBeat_ = jsBeat_ = NowMs(); }

void Watchdog::BeatJs() { jsBeat_ = NowMs(); }

void Watchdog::Start(int64_t ms, v8::Isolate* isolate) {
  ms_ = ms;
  isolate_ = isolate;
  if (ms > 0) thread_ = std::thread([this] { Run(); });
}

void Watchdog::Stop() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> g(mu_);
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void Watchdog::JsStackInterrupt(v8::Isolate* isolate, void* data) {
  auto* self = static_cast<Watchdog*>(data);
  std::string out = "leash-watcher: JavaScript stack:\n";
  v8::HandleScope scope(isolate);
  v8::Local<v8::StackTrace> st = v8::StackTrace::CurrentStackTrace(isolate, 32);
  for (int i = 0; i < st->GetFrameCount(); i++) {
    v8::Local<v8::StackFrame> f = st->GetFrame(isolate, i);
    v8::String::Utf8Value fn(isolate, f->GetFunctionName());
    v8::String::Utf8Value script(isolate, f->GetScriptName());
    char line[64];
    snprintf(line, sizeof line, ":%d:%d\n", f->GetLineNumber(), f->GetColumn());
    out += "    at ";
    out += (*fn && **fn) ? *fn : "<anonymous>";
    out += " (";
    out += *script ? *script : "<unknown>";
    out += line;
  }
  WriteAll(2, out);
  self->jsDumped_.store(true);
}

void Watchdog::Run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_.load()) {
    cv_.wait_for(lk, std::chrono::milliseconds(500));
    if (stop_.load()) break;
    int64_t now = NowMs();
    int64_t loopAge = loopDone_.load() ? 0 : now - loopBeat_.load();
    int64_t jsAge = now - jsBeat_.load();
    if (loopAge < ms_ && jsAge < ms_) continue;
    char head[256];
    snprintf(head, sizeof head,
             "leash-watcher: watchdog: %s stalled (loop %lld ms, js %lld ms); loop phase: %s, pid %d; "
             "dumping stacks and exiting\n",
             loopAge >= ms_ ? "the fanotify loop" : "the JavaScript side", static_cast<long long>(loopAge),
             static_cast<long long>(jsAge), kPhaseNames[phase_.load()], curPid_.load());
    WriteAll(2, head);
    DumpThreads();
    // The JS stack can only be read on the JS thread: ask V8 to interrupt it. A
    // busy loop or Atomics.wait runs the interrupt; a blocking syscall does not.
    if (isolate_) isolate_->RequestInterrupt(JsStackInterrupt, this);
    for (int i = 0; i < 30 && !jsDumped_.load(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!jsDumped_.load()) WriteAll(2, "leash-watcher: JavaScript stack unavailable (thread blocked outside V8)\n");
    // Exiting closes the group, which answers every pending event allow; the service respawns us.
    _exit(70);
  }
}

}  // namespace leash
