// bench/proxy's floor: about the least work a TCP-terminating transparent proxy can do per byte. One thread, one
// epoll set: it accepts a redirected connection, connects to its SO_ORIGINAL_DST at once (no peek, no decision, no
// log) and moves each direction socket -> pipe (1 MiB) -> socket with splice(2), never through user space. What any
// such proxy (Leash, nginx, this) costs on top of a direct connection, this costs about the least of: a proxy's bulk
// ratio against direct is not to be expected above this one's in the same run. Connections are handled one at a
// time (the bench moves one bulk stream at a time).
//   proxy-relay <listen-port>        (IPv4, 127.0.0.1; runs until killed)
//   proxy-relay <listen-port> copy   the floor per new connection instead (run_copy, below)
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

struct dir {
  int in, out, pipe[2];
  size_t held;  // bytes in the pipe
  int done;
};

// Moves what can be moved now; 1 when this direction has finished (EOF passed on, or an error).
static int pump(struct dir *d) {
  for (;;) {
    while (d->held > 0) {
      ssize_t w = splice(d->pipe[0], NULL, d->out, NULL, d->held, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (w > 0) {
        d->held -= (size_t)w;
        continue;
      }
      if (w < 0 && errno == EAGAIN) return 0;
      return 1;
    }
    ssize_t n = splice(d->in, NULL, d->pipe[1], NULL, 1 << 20, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      d->held = (size_t)n;
      continue;
    }
    if (n < 0 && errno == EAGAIN) return 0;
    shutdown(d->out, SHUT_WR);
    return 1;
  }
}

// ---- copy mode: the floor per new connection ----
// Many connections at once on one epoll set (edge-triggered, each socket registered once and never modified):
// accept one connection per wake of the listener, read SO_ORIGINAL_DST, connect to it at once (no peek, no
// decision, no log), and copy each message through a user-space buffer with recv/send. A half-close is passed on
// (shutdown), as a transparent proxy owes its client; the pair is closed once both directions have ended. This is
// about the fewest system calls per connection a terminating proxy can make: bench/proxy's connection phase
// measures it beside Leash and nginx.
struct side {
  struct pair *p;
  int i;  // 0: the client, 1: the upstream
};
struct pair {
  int fd[2];
  struct side s[2];
  char buf[2][16384];  // buf[i]: bytes read from fd[i] not yet written to fd[1 - i]
  size_t off[2], len[2];
  int eof[2];   // direction i (fd[i] -> fd[1 - i]) has ended and its end was passed on
  int dead;
};

// Moves direction i as far as it goes now; -1 when the pair failed.
static int copy_dir(struct pair *p, int i) {
  int in = p->fd[i], out = p->fd[1 - i];
  while (!p->eof[i]) {
    while (p->len[i] > 0) {
      ssize_t w = send(out, p->buf[i] + p->off[i], p->len[i], MSG_NOSIGNAL);
      if (w < 0) return errno == EAGAIN ? 0 : -1;
      p->off[i] += (size_t)w;
      p->len[i] -= (size_t)w;
    }
    ssize_t n = recv(in, p->buf[i], sizeof p->buf[i], 0);
    if (n > 0) {
      p->off[i] = 0;
      p->len[i] = (size_t)n;
      continue;
    }
    if (n < 0) return errno == EAGAIN ? 0 : -1;
    shutdown(out, SHUT_WR);
    p->eof[i] = 1;
  }
  return 0;
}

static int run_copy(int ls) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(ep, EPOLL_CTL_ADD, ls, &lev);
  printf("ready\n");
  fflush(stdout);
  struct epoll_event evs[64];
  struct pair *gone[64];
  int ngone = 0;
  for (;;) {
    int n = epoll_wait(ep, evs, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      perror("proxy-relay: epoll_wait");
      return 1;
    }
    for (int k = 0; k < n; k++) {
      struct side *s = evs[k].data.ptr;
      if (s == NULL) {
        int cs = accept4(ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (cs < 0) continue;
        struct sockaddr_in dst;
        socklen_t len = sizeof dst;
        int us = -1;
        if (getsockopt(cs, SOL_IP, SO_ORIGINAL_DST, &dst, &len) != 0 ||
            (us = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0 ||
            (connect(us, (struct sockaddr *)&dst, sizeof dst) != 0 && errno != EINPROGRESS)) {
          if (us >= 0) close(us);
          close(cs);
          continue;
        }
        struct pair *p = calloc(1, sizeof *p);
        p->fd[0] = cs;
        p->fd[1] = us;
        for (int i = 0; i < 2; i++) {
          p->s[i] = (struct side){p, i};
          struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = &p->s[i]};
          epoll_ctl(ep, EPOLL_CTL_ADD, p->fd[i], &ev);
        }
        continue;
      }
      struct pair *p = s->p;
      if (p->dead) continue;
      // Either socket's news can move either direction (readable in, or writable out): try both.
      if (copy_dir(p, 0) < 0 || copy_dir(p, 1) < 0 || (p->eof[0] && p->eof[1]) || (evs[k].events & EPOLLERR)) {
        p->dead = 1;
        close(p->fd[0]);
        close(p->fd[1]);
        gone[ngone++] = p;  // freed after this batch: a later event of the batch may still name it
      }
    }
    while (ngone > 0) free(gone[--ngone]);
  }
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "copy") != 0)) {
    fprintf(stderr, "usage: proxy-relay <listen-port> [copy]\n");
    return 2;
  }
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 512) != 0) {
    perror("proxy-relay: listen");
    return 1;
  }
  if (argc == 3) {
    // Inherited by every accepted socket: no call per connection (Leash's and nginx's listeners do the same).
    setsockopt(ls, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    listen(ls, 4096);
    return run_copy(ls);
  }
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct dir d[2];
  for (int i = 0; i < 2; i++) {
    if (pipe2(d[i].pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      perror("proxy-relay: pipe2");
      return 1;
    }
    fcntl(d[i].pipe[1], F_SETPIPE_SZ, 1 << 20);
  }
  printf("ready\n");
  fflush(stdout);
  for (;;) {
    int cs = accept4(ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (cs < 0) {
      if (errno == EINTR) continue;
      perror("proxy-relay: accept");
      return 1;
    }
    struct sockaddr_in dst;
    socklen_t len = sizeof dst;
    int us = -1;
    if (getsockopt(cs, SOL_IP, SO_ORIGINAL_DST, &dst, &len) != 0 ||
        (us = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        connect(us, (struct sockaddr *)&dst, sizeof dst) != 0) {
      perror("proxy-relay: original destination");
      if (us >= 0) close(us);
      close(cs);
      continue;
    }
    fcntl(us, F_SETFL, O_NONBLOCK);
    setsockopt(cs, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(us, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    d[0] = (struct dir){cs, us, {d[0].pipe[0], d[0].pipe[1]}, 0, 0};
    d[1] = (struct dir){us, cs, {d[1].pipe[0], d[1].pipe[1]}, 0, 0};
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET};
    ev.data.fd = cs;
    epoll_ctl(ep, EPOLL_CTL_ADD, cs, &ev);
    ev.data.fd = us;
    epoll_ctl(ep, EPOLL_CTL_ADD, us, &ev);
    while (!(d[0].done && d[1].done)) {
      struct epoll_event evs[2];
      int n = epoll_wait(ep, evs, 2, -1);
      if (n < 0 && errno != EINTR) break;
      // Either socket's news can move either direction (readable in, or writable out): try both.
      for (int i = 0; i < 2; i++)
        if (!d[i].done && pump(&d[i])) d[i].done = 1;
      if (n > 0 && (evs[0].events & (EPOLLERR | EPOLLHUP)) && !(evs[0].events & EPOLLIN)) break;
    }
    epoll_ctl(ep, EPOLL_CTL_DEL, cs, NULL);
    epoll_ctl(ep, EPOLL_CTL_DEL, us, NULL);
    close(cs);
    close(us);
    // A pipe still holding bytes (a direction cut short) cannot be reused.
    for (int i = 0; i < 2; i++) {
      if (d[i].held == 0) continue;
      close(d[i].pipe[0]);
      close(d[i].pipe[1]);
      if (pipe2(d[i].pipe, O_CLOEXEC | O_NONBLOCK) != 0) return 1;
      fcntl(d[i].pipe[1], F_SETPIPE_SZ, 1 << 20);
    }
  }
}
