/* refuse.c -- runs a program with some system calls refused (EPERM), as a container's seccomp profile does.
 * Usage: refuse NR[,NR...] PROGRAM [ARG...]: a seccomp filter (PR_SET_NO_NEW_PRIVS first) makes each
 * system call NR (x86_64 numbers) fail with EPERM, then PROGRAM is exec'd under it. Exits 2 when the
 * filter cannot be installed (not x86_64, or seccomp refused). */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define MAX_NR 16

int main(int argc, char **argv)
{
    struct sock_filter f[4 + 2 * MAX_NR];
    unsigned n = 0, k = 0, nr[MAX_NR];

    if (argc < 3) {
        fprintf(stderr, "usage: refuse NR[,NR...] PROGRAM [ARG...]\n");
        return 2;
    }
    for (char *p = argv[1]; *p && k < MAX_NR; p += *p == ',')
        nr[k++] = (unsigned)strtoul(p, &p, 10);
#ifndef __x86_64__
    fprintf(stderr, "refuse: x86_64 only\n");
    return 2;
#endif
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    for (unsigned i = 0; i < k; i++) {
        f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr[i], 0, 1);
        f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
    }
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = { .len = (unsigned short)n, .filter = f };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        fprintf(stderr, "refuse: seccomp: %s\n", strerror(errno));
        return 2;
    }
    execvp(argv[2], argv + 2);
    fprintf(stderr, "refuse: %s: %s\n", argv[2], strerror(errno));
    return 127;
}
