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
  ssize_t r = pread(fd, ph, size, static_cast<off_t>(e.e_phoff));
  if (r != static_cast<ssize_t>(size)) return InterpRead::kMalformed;
  for (size_t i = 0; i < e.e_phnum; i++) {
    if (ph[i].p_type != PT_INTERP) continue;  // only the first counts, as in the kernel
    if (ph[i].p_filesz > PATH_MAX || ph[i].p_filesz < 2) return InterpRead::kMalformed;
    char buf[PATH_MAX + 1];
    size_t len = static_cast<size_t>(ph[i].p_filesz);
    if (pread(fd, buf, len, static_cast<off_t>(ph[i].p_offset)) != static_cast<ssize_t>(len))
      return InterpRead::kMalformed;
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
bool ResolveInterpreter(int32_t pid, const std::string& path, struct stat* st) {
  if (path.empty() || path[0] != '/') return false;
  char root[64];
  snprintf(root, sizeof root, "/proc/%d/root", pid);
  int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
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

/**
 * Is the process blocked in a binary format's loader (its exec-open of an interpreter), rather
 * than in an execve of its own? A stale entry (an execve that failed after its exec-open, e.g. a
 * bad argv pointer) followed by a direct execve of the loader gives the same events as a real
 * exec; the kernel stack tells them apart. The process is blocked on our answer, so its stack
 * cannot change while it is read; a second thread could exec the loader while the first is in
 * a loader, so only a single-threaded process qualifies.
 */
bool InBinfmtLoader(int32_t pid) {
  char path[64];
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
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    const char* p = strrchr(buf, ')');
    if (!p || p[1] != ' ') return false;
    char state = p[2];
    p++;
    for (int f = 0; f < 17 && p; f++) p = strchr(p + 1, ' ');  // p: " S ppid...": to the space before field 20, num_threads
    if (!p || strtol(p + 1, nullptr, 10) != 1) return false;
    if (state == 'R') continue;  // not asleep yet
    snprintf(path, sizeof path, "/proc/%d/stack", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 0) return false;
    buf[n] = 0;
    if (n == 0) continue;  // woke or switched between the two reads: look again
    // The loaders that exec-open an interpreter: ELF (PT_INTERP), #! scripts, binfmt_misc.
    return strstr(buf, " load_elf_binary+") || strstr(buf, " load_script+") || strstr(buf, " load_misc_binary+") ||
           strstr(buf, " load_elf_fdpic_binary+");
  }
  return false;
}

}  // namespace

InterpRead ReadInterpreter(int fd, std::string* out) {
  unsigned char head[256];  // BINPRM_BUF_SIZE: what the kernel reads of the file first
  ssize_t n = pread(fd, head, sizeof head, 0);
  if (n < 0) return InterpRead::kMalformed;
  size_t len = static_cast<size_t>(n);
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
  if (head[EI_CLASS] == ELFCLASS64) return ElfInterp<Elf64_Ehdr, Elf64_Phdr>(fd, head, len, out);
  if (head[EI_CLASS] == ELFCLASS32) return ElfInterp<Elf32_Ehdr, Elf32_Phdr>(fd, head, len, out);
  return InterpRead::kMalformed;
}

bool ExecState::Take(int32_t pid, int fd, int64_t nowNs) {
  if (entries_.empty()) return false;
  auto it = entries_.find(pid);
  if (it == entries_.end()) return false;
  Entry e = std::move(it->second);
  entries_.erase(it);
  struct stat st;
  if (nowNs - e.atNs > kTtlNs) return false;
  if (fstat(fd, &st) != 0 || st.st_dev != e.dev || st.st_ino != e.ino) return false;
  if (!InBinfmtLoader(pid)) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  program_ = std::move(e.program);
  return true;
}

bool ExecState::Remember(int32_t pid, int fd, std::string_view program, int64_t nowNs) {
  std::string interp;
  InterpRead r = ReadInterpreter(fd, &interp);
  if (r == InterpRead::kMalformed) return false;
  if (r == InterpRead::kNone) return true;
  struct stat st;
  if (!ResolveInterpreter(pid, interp, &st)) return true;  // the exec will fail; nothing implied
  if (entries_.size() >= kMax) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (nowNs - it->second.atNs > kTtlNs) it = entries_.erase(it);
      else ++it;
    }
    if (entries_.size() >= kMax) {
      // Fails closed: a dropped entry only leaves an interpreter to be judged by its own name.
      dropped_.fetch_add(entries_.size(), std::memory_order_relaxed);
      entries_.clear();
    }
  }
  entries_[pid] = {st.st_dev, st.st_ino, nowNs, std::string(program)};
  return true;
}

}  // namespace leash
