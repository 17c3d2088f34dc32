// Exec state per process (see exec_state.h): bounded reads of the headers the kernel reads,
// the interpreter resolved from the process's own root, and the kernel-stack check that tells
// the kernel's exec-open of an interpreter from an execve of it.
#include "exec_state.h"

#include <elf.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace leash {

namespace {

// Reads `len` bytes at `off` of the file: from `head` (the first `n` bytes, already read) when they
// lie in it, else with a pread. True only for all `len` bytes, as a pread of them would give.
bool ReadAt(int fd, const unsigned char* head, size_t n, uint64_t off, size_t len, void* dst) {
  if (off <= n && len <= n - off) {
    memcpy(dst, head + off, len);
    return true;
  }
  return pread(fd, dst, len, static_cast<off_t>(off)) == static_cast<ssize_t>(len);
}

template <typename Ehdr, typename Phdr>
InterpRead ElfInterp(int fd, const unsigned char* head, size_t n, std::string* out) {
  if (n < sizeof(Ehdr)) return InterpRead::kMalformed;
  Ehdr e;
  memcpy(&e, head, sizeof e);
  if (e.e_type != ET_EXEC && e.e_type != ET_DYN) return InterpRead::kNone;  // the kernel runs neither
  // The kernel's own bounds (fs/binfmt_elf.c load_elf_phdrs): a table it would refuse is malformed.
  size_t size = static_cast<size_t>(e.e_phnum) * e.e_phentsize;
  if (e.e_phentsize != sizeof(Phdr) || size == 0 || size > 4096) return InterpRead::kMalformed;
  Phdr ph[4096 / sizeof(Phdr)];
  if (!ReadAt(fd, head, n, e.e_phoff, size, ph)) return InterpRead::kMalformed;
  for (size_t i = 0; i < e.e_phnum; i++) {
    if (ph[i].p_type != PT_INTERP) continue;  // only the first counts, as in the kernel
    if (ph[i].p_filesz > PATH_MAX || ph[i].p_filesz < 2) return InterpRead::kMalformed;
    char buf[PATH_MAX + 1];
    size_t len = static_cast<size_t>(ph[i].p_filesz);
    if (!ReadAt(fd, head, n, ph[i].p_offset, len, buf)) return InterpRead::kMalformed;
    if (buf[len - 1] != 0) return InterpRead::kMalformed;
    out->assign(buf);  // up to the first NUL, as the kernel opens it
    return InterpRead::kFound;
  }
  return InterpRead::kNone;  // a static binary: nothing is loaded after it
}

/**
 * Resolves an interpreter path as the kernel does for the process: from its root (a chroot, its
 * mount namespace), following symlinks. O_PATH raises no fanotify event, so the loop can do this
 * on a marked filesystem without waiting for itself. A relative path (resolved by the kernel from
 * the process's working directory) is not followed: nothing is implied for it.
 */
bool ResolveInterpreter(int procDir, const std::string& path, struct stat* st) {
  if (path.empty() || path[0] != '/') return false;
  int rfd = openat(procDir, "root", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0) return false;
  open_how how;
  memset(&how, 0, sizeof how);
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  int fd = static_cast<int>(syscall(SYS_openat2, rfd, path.c_str(), &how, sizeof how));
  close(rfd);
  if (fd < 0) return false;
  bool ok = fstat(fd, st) == 0;
  close(fd);
  return ok;
}

/** Which binary format's loader a process is blocked in (see InBinfmtLoader). */
enum class Loader { kNone, kElf, kChaining };

/**
 * Is the process blocked in a binary format's loader (its exec-open of an interpreter), rather
 * than in an execve of its own? A stale entry (an execve that failed after its exec-open, e.g. a
 * bad argv pointer) followed by a direct execve of the loader gives the same events as a real
 * exec; the kernel stack tells them apart. The process is blocked on our answer, so its stack
 * cannot change while it is read; a second thread could exec the loader while the first is in
 * a loader, so only a single-threaded process qualifies. `statFd`/`stackFd`: the process's
 * /proc/<pid>/stat and /proc/<pid>/stack, opened ahead (a pread regenerates them).
 * kElf: the innermost loader is the ELF loader (it reads no PT_INTERP of the file it opens);
 * kChaining: a `#!` or binfmt_misc loader (the file it opens is run as a program in turn).
 */
Loader InBinfmtLoader(int statFd, int stackFd) {
  if (statFd < 0 || stackFd < 0) return Loader::kNone;
  char buf[8192];
  // The event can be read before the process has gone to sleep waiting for the answer; a task
  // still running on another CPU shows an empty stack. So: wait (briefly, bounded) until it sleeps.
  for (int attempt = 0; attempt < 200; attempt++) {
    if (attempt > 0) {
      if (attempt < 50) {
        sched_yield();
      } else {
        timespec ts{0, 20 * 1000};
        nanosleep(&ts, nullptr);
      }
    }
    ssize_t n = pread(statFd, buf, sizeof buf - 1, 0);
    if (n <= 0) return Loader::kNone;  // the process is gone (ESRCH)
    buf[n] = 0;
    const char* p = strrchr(buf, ')');
    if (!p || p[1] != ' ') return Loader::kNone;
    char state = p[2];
    p++;
    for (int f = 0; f < 17 && p; f++) p = strchr(p + 1, ' ');  // p: " S ppid...": to the space before field 20, num_threads
    if (!p || strtol(p + 1, nullptr, 10) != 1) return Loader::kNone;
    if (state == 'R') continue;  // not asleep yet
    n = pread(stackFd, buf, sizeof buf - 1, 0);
    if (n < 0) return Loader::kNone;
    buf[n] = 0;
    if (n == 0) continue;  // woke or switched between the two reads: look again
    // The loaders that exec-open an interpreter: ELF (PT_INTERP), #! scripts, binfmt_misc. The
    // stack is listed innermost first: the first loader frame is the one opening this file.
    const char* frames[] = {" load_elf_binary+", " load_elf_fdpic_binary+", " load_script+", " load_misc_binary+"};
    const char* first = nullptr;
    int which = -1;
    for (int i = 0; i < 4; i++) {
      const char* at = strstr(buf, frames[i]);
      if (at && (!first || at < first)) {
        first = at;
        which = i;
      }
    }
    if (which < 0) return Loader::kNone;
    return which < 2 ? Loader::kElf : Loader::kChaining;
  }
  return Loader::kNone;
}

}  // namespace

InterpRead ReadInterpreter(int fd, std::string* out) {
  // One read that usually holds the ELF header, the program headers and PT_INTERP's path too.
  unsigned char head[2048];
  ssize_t n = pread(fd, head, sizeof head, 0);
  if (n < 0) return InterpRead::kMalformed;
  size_t got = static_cast<size_t>(n);
  size_t len = got < 256 ? got : 256;  // BINPRM_BUF_SIZE: what the kernel reads of the file first
  if (len >= 2 && head[0] == '#' && head[1] == '!') {
    // fs/binfmt_script.c: blanks, then the interpreter up to a blank, a newline or NUL.
    size_t i = 2;
    while (i < len && (head[i] == ' ' || head[i] == '\t')) i++;
    size_t start = i;
    while (i < len && head[i] != ' ' && head[i] != '\t' && head[i] != '\n' && head[i] != 0) i++;
    if (i == start || i == len) return InterpRead::kNone;  // no interpreter, or cut off: ENOEXEC
    out->assign(reinterpret_cast<const char*>(head + start), i - start);
    return InterpRead::kFound;
  }
  if (len < EI_NIDENT || memcmp(head, ELFMAG, SELFMAG) != 0) return InterpRead::kNone;
  if (head[EI_DATA] != ELFDATA2LSB) return InterpRead::kNone;  // not this machine's: the kernel refuses it
  if (head[EI_CLASS] == ELFCLASS64) return ElfInterp<Elf64_Ehdr, Elf64_Phdr>(fd, head, got, out);
  if (head[EI_CLASS] == ELFCLASS32) return ElfInterp<Elf32_Ehdr, Elf32_Phdr>(fd, head, got, out);
  return InterpRead::kMalformed;
}

bool ExecState::Take(int32_t pid, int fd, int64_t nowNs) {
  if (entries_.empty()) return false;
  auto it = entries_.find(pid);
  if (it == entries_.end()) return false;
  Entry e = std::move(it->second);
  entries_.erase(it);
  retired_.push_back(e.statFd);  // closed after the answer
  retired_.push_back(e.stackFd);
  struct stat st;
  if (nowNs - e.atNs > kTtlNs) return false;
  if (fstat(fd, &st) != 0 || st.st_dev != e.dev || st.st_ino != e.ino) return false;
  Loader l = InBinfmtLoader(e.statFd, e.stackFd);
  if (l == Loader::kNone) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  servedChains_ = l == Loader::kChaining;
  program_ = std::move(e.program);
  return true;
}

bool ExecState::Prepare(int32_t pid, int fd, std::string_view program) {
  pending_.set = false;
  InterpRead r = ReadInterpreter(fd, &pending_.interp);
  if (r == InterpRead::kMalformed) return false;
  if (r == InterpRead::kNone) return true;
  pending_.set = true;
  pending_.pid = pid;
  pending_.program.assign(program.data(), program.size());
  return true;
}

void ExecState::AfterAnswer(int64_t nowNs) {
  for (int fd : retired_) close(fd);
  retired_.clear();
  if (!pending_.set) return;
  pending_.set = false;
  // /proc/<pid> opened once: the root to resolve from and the files the interpreter's event reads
  // all name this process (a reused PID would not make them name another: they fail instead).
  char dir[32];
  snprintf(dir, sizeof dir, "/proc/%d", pending_.pid);
  int procDir = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (procDir < 0) return;
  struct stat st;
  bool resolved = ResolveInterpreter(procDir, pending_.interp, &st);  // else the exec will fail; nothing implied
  int statFd = resolved ? openat(procDir, "stat", O_RDONLY | O_CLOEXEC) : -1;
  int stackFd = statFd >= 0 ? openat(procDir, "stack", O_RDONLY | O_CLOEXEC) : -1;
  close(procDir);
  if (stackFd < 0) {
    // Without its stack nothing can be implied: the interpreter is judged by its own name.
    if (statFd >= 0) close(statFd);
    return;
  }
  if (entries_.size() >= kMax) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (nowNs - it->second.atNs > kTtlNs) {
        close(it->second.statFd);
        close(it->second.stackFd);
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
    if (entries_.size() >= kMax) {
      // Fails closed: a dropped entry only leaves an interpreter to be judged by its own name.
      dropped_.fetch_add(entries_.size(), std::memory_order_relaxed);
      Close();
    }
  }
  auto old = entries_.find(pending_.pid);  // none: Take ended it at this exec's own event
  if (old != entries_.end()) {
    close(old->second.statFd);
    close(old->second.stackFd);
    entries_.erase(old);
  }
  entries_.emplace(pending_.pid, Entry{st.st_dev, st.st_ino, nowNs, std::move(pending_.program), statFd, stackFd});
}

void ExecState::Close() {
  for (auto& kv : entries_) {
    close(kv.second.statFd);
    close(kv.second.stackFd);
  }
  entries_.clear();
  for (int fd : retired_) close(fd);
  retired_.clear();
}

}  // namespace leash
