/*
 * The minimal fanotify permission listener the Leash watcher is measured against:
 * one thread, blocking read, and per event what a naive listener does: readlink of
 * the event fd, the opener's UID from /proc/<pid>/status, then allow.
 * Usage: listener <path-on-the-filesystem-to-mark>   (prints "ready" once marked)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <unistd.h>

static unsigned uid_of(int pid) {
  char p[64], buf[2048];
  snprintf(p, sizeof p, "/proc/%d/status", pid);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return (unsigned)-1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return (unsigned)-1;
  buf[n] = 0;
  char *u = strstr(buf, "\nUid:");
  return u ? (unsigned)strtoul(u + 5, NULL, 10) : (unsigned)-1;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  int fd = fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC, O_RDONLY | O_LARGEFILE | O_CLOEXEC);
  if (fd < 0) { perror("fanotify_init"); return 1; }
  if (fanotify_mark(fd, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, FAN_OPEN_PERM | FAN_OPEN_EXEC_PERM | FAN_ONDIR,
                    AT_FDCWD, argv[1]) != 0) { perror("fanotify_mark"); return 1; }
  printf("ready\n");
  fflush(stdout);
  char buf[65536] __attribute__((aligned(8)));
  unsigned long long sink = 0;
  for (;;) {
    ssize_t len = read(fd, buf, sizeof buf);
    if (len <= 0) return 1;
    struct fanotify_event_metadata *m = (struct fanotify_event_metadata *)buf;
    while (FAN_EVENT_OK(m, len)) {
      char link[64], path[PATH_MAX];
      snprintf(link, sizeof link, "/proc/self/fd/%d", m->fd);
      ssize_t pl = readlink(link, path, sizeof path - 1);
      sink += (unsigned long long)pl + uid_of(m->pid);
      struct fanotify_response r = {m->fd, FAN_ALLOW};
      if (write(fd, &r, sizeof r) != sizeof r) return 1;
      close(m->fd);
      m = FAN_EVENT_NEXT(m, len);
    }
  }
  return (int)(sink & 1);
}
