/* errno_nothp: malloc leaves errno alone when it succeeds, on a kernel that
 * refuses MADV_NOHUGEPAGE (built without transparent huge pages: EINVAL).
 * A seccomp filter makes this kernel refuse that advice the same way; then
 * the program allocates what makes freeway reserve address space (a first
 * block: its region; a huge block: a mapping of its own) and checks errno
 * after each. Exit 0 when errno stayed 0, 1 when it changed, 77 when seccomp
 * is not available. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

static int refuse_nohugepage(void) {
  struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_madvise, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_NOHUGEPAGE, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof code / sizeof code[0], code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

static int check(const char* what, void* p) {
  int e = errno;
  if (p == NULL) {
    printf("errno_nothp: %s failed: %s\n", what, strerror(e));
    return 1;
  }
  if (e != 0) {
    printf("errno_nothp: %s succeeded but set errno to %d (%s)\n", what, e, strerror(e));
    return 1;
  }
  return 0;
}

int main(void) {
  if (refuse_nohugepage() != 0) {
    printf("errno_nothp: seccomp unavailable: %s\n", strerror(errno));
    return 77;
  }
  /* The filter works: the advice is refused as a kernel without THP does. */
  void* m = mmap(NULL, 1 << 21, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED || madvise(m, 1 << 21, MADV_NOHUGEPAGE) == 0 || errno != EINVAL) {
    printf("errno_nothp: the filter does not refuse MADV_NOHUGEPAGE\n");
    return 1;
  }
  munmap(m, 1 << 21);
  int bad = 0;
  errno = 0;
  bad |= check("malloc(16)", malloc(16));
  errno = 0;
  bad |= check("malloc(3 GiB)", malloc((size_t)3 << 30));
  if (!bad) printf("errno_nothp: errno stayed 0 with MADV_NOHUGEPAGE refused\n");
  return bad;
}
