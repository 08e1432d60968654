/* sandbox_exec — runs a program under the seccomp policy of a systemd unit, for
 * tests/test_units.sh.
 *
 * sandbox_exec SYSCALLS ERRNO FAMILIES MDWE PROGRAM [ARG]...
 *
 * SYSCALLS is a file of system call numbers, one per line: the calls the unit's
 * SystemCallFilter= allows. Any other call fails with errno ERRNO (a number; the
 * unit's SystemCallErrorNumber=), or kills the process when ERRNO is 0. FAMILIES
 * is a comma-separated list of address-family numbers (RestrictAddressFamilies=):
 * socket() with any other family fails with EAFNOSUPPORT, as under systemd. MDWE 1
 * refuses writable executable memory as MemoryDenyWriteExecute= does: mmap() with
 * PROT_WRITE and PROT_EXEC, and mprotect() or pkey_mprotect() adding PROT_EXEC,
 * fail with EPERM. Then PROGRAM is executed with the filter in place (no new
 * privileges, as NoNewPrivileges= gives). Exit status 125 if the filter cannot
 * be set up.
 *
 * It is not built by `make check`: the test compiles it with $CC, so that the
 * list of test programs stays the Check suites. */
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
#include <unistd.h>

#define MAX_RULES 1024

/* Each allowed value costs two instructions, a comparison that falls through to
 * its own RET ALLOW: classic BPF jumps reach only 255 instructions ahead. */
static size_t allow_if(struct sock_filter *f, size_t n, unsigned value)
{
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    return n;
}

/* If the call is `nr` and its protection argument has all of `bits`: EPERM. The
 * call number is reloaded after, for the rules that follow. */
static size_t deny_prot(struct sock_filter *f, size_t n, unsigned nr, unsigned bits)
{
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 4);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, args[2]));
    f[n++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_AND | BPF_K, bits);
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, bits, 0, 1);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
    f[n++] =
        (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    return n;
}

int main(int argc, char **argv)
{
    static struct sock_filter f[4 * MAX_RULES + 16];
    size_t n = 0, n_families = 0;
    unsigned families[64];

    if (argc < 6) {
        fprintf(stderr, "usage: sandbox_exec SYSCALLS ERRNO FAMILIES MDWE PROGRAM [ARG]...\n");
        return 125;
    }
    int err = atoi(argv[2]);
    for (char *tok = strtok(argv[3], ","); tok && n_families < 64; tok = strtok(NULL, ","))
        families[n_families++] = (unsigned)atoi(tok);

    f[n++] =
        (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    if (atoi(argv[4])) {
        n = deny_prot(f, n, __NR_mmap, PROT_WRITE | PROT_EXEC);
        n = deny_prot(f, n, __NR_mprotect, PROT_EXEC);
        n = deny_prot(f, n, __NR_pkey_mprotect, PROT_EXEC);
    }
    /* socket(): look at the family; every other call skips these 2 * families + 2. */
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0,
                                          (unsigned char)(2 * n_families + 2));
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, args[0]));
    for (size_t i = 0; i < n_families; i++)
        n = allow_if(f, n, families[i]);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT);

    FILE *in = fopen(argv[1], "r");
    if (!in) {
        perror(argv[1]);
        return 125;
    }
    unsigned nr;
    size_t rules = 0;
    while (fscanf(in, "%u", &nr) == 1 && rules++ < MAX_RULES)
        n = allow_if(f, n, nr);
    fclose(in);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, err ? SECCOMP_RET_ERRNO | (unsigned)err
                                                               : SECCOMP_RET_KILL_PROCESS);

    struct sock_fprog prog = {(unsigned short)n, f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("sandbox_exec: seccomp");
        return 125;
    }
    execv(argv[5], argv + 5);
    perror(argv[5]);
    return 125;
}
