/*
 * The exec loop: N times fork + execve(prog) + wait; prints execs per second.
 * Usage: execer <prog> <count>
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  long n = atol(argv[2]);
  char *args[] = {argv[1], NULL};
  char *env[] = {NULL};
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < n; i++) {
    pid_t p = fork();
    if (p == 0) {
      execve(argv[1], args, env);
      _exit(127);
    }
    int st;
    if (p < 0 || waitpid(p, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "exec %ld failed\n", i);
      return 1;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
  printf("%.0f\n", (double)n / s);
  return 0;
}
