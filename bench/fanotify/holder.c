/*
 * bench/hold-herd's listener: holds every open permission event of one file (argv[2]) unanswered, as
 * Leash's watcher holds an asked open for an approver, and allows every other event at once.
 * Usage: holder <mount to mark> <file to hold>. Prints "ready", then "held N" as holds grow; ends on
 * SIGTERM (closing the group answers every held event allow).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int c, char **v) {
  if (c < 3) return 2;
  struct stat hs; if (stat(v[2], &hs)) { perror("stat"); return 1; }
  int fd = fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC, O_RDONLY | O_CLOEXEC);
  if (fd < 0) { perror("fanotify_init"); return 1; }
  if (fanotify_mark(fd, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, FAN_OPEN_PERM, AT_FDCWD, v[1])) { perror("mark"); return 1; }
  printf("ready\n"); fflush(stdout);
  char buf[4096] __attribute__((aligned(8))); int held = 0;
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf); if (n <= 0) return 1;
    for (struct fanotify_event_metadata *m = (void *)buf; FAN_EVENT_OK(m, n); m = FAN_EVENT_NEXT(m, n)) {
      struct stat st;
      if (m->fd >= 0 && fstat(m->fd, &st) == 0 && st.st_ino == hs.st_ino && st.st_dev == hs.st_dev) {
        held++; printf("held %d\n", held); fflush(stdout); continue;  // never answered
      }
      struct fanotify_response r = {m->fd, FAN_ALLOW};
      if (write(fd, &r, sizeof r) != sizeof r) return 1;
      close(m->fd);
    }
  }
}
