/* spawn: helper of bench/run, not a benchmark.
 *
 *   spawn OUTFILE PRELOAD PROGRAM [ARGS...]
 *
 * Forks, runs PROGRAM with LD_PRELOAD=PRELOAD ("-" for none) in the child,
 * waits for it with wait4() and writes the child's exit status and resource
 * usage to OUTFILE as key=value lines.
 *
 * Why not let bench/run (Python) wait for the benchmark directly: Linux
 * carries a process's peak RSS across execve(), so a program started
 * straight from the Python interpreter reports the interpreter's RSS
 * (~14 MiB) as its own ru_maxrss whenever it uses less.  A child forked from
 * this small program starts from a ~1 MiB image instead. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s OUTFILE PRELOAD|- PROGRAM [ARGS...]\n", argv[0]);
    return 120;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid < 0) { perror("fork"); return 121; }
  if (pid == 0) {
    if (strcmp(argv[2], "-") != 0) setenv("LD_PRELOAD", argv[2], 1);
    else unsetenv("LD_PRELOAD");
    execv(argv[3], argv + 3);
    fprintf(stderr, "spawn: cannot run %s: %s\n", argv[3], strerror(errno));
    _exit(127);
  }
  int status;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) { perror("wait4"); return 122; }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  FILE *f = fopen(argv[1], "w");
  if (!f) { perror(argv[1]); return 123; }
  fprintf(f, "exited=%d\nexit_code=%d\nsignal=%d\n", WIFEXITED(status) ? 1 : 0,
          WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  fprintf(f, "wall_s=%.6f\nmaxrss_kb=%ld\nminflt=%ld\nmajflt=%ld\n",
          (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9, ru.ru_maxrss,
          ru.ru_minflt, ru.ru_majflt);
  fprintf(f, "utime_s=%.6f\nstime_s=%.6f\nnvcsw=%ld\nnivcsw=%ld\n",
          (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6,
          (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6, ru.ru_nvcsw, ru.ru_nivcsw);
  fclose(f);
  return 0;
}
