/*
 * The long-lived first process of a namespace box: its pid 1 (bubblewrap
 * runs it with --as-pid-1, so no reaper of bubblewrap's runs beside it).
 * It keeps the namespaces alive while it lives, ignores every signal but
 * SIGKILL (which only its parent, or its parent's death, sends) and reaps
 * whatever is orphaned in the box, until the box is stopped. It is built static so that it runs in any image
 * (even one without a libc) and is executed from a sealed memfd, so it
 * leaves no file in the box.
 *
 * Its first act is one byte on READY_FD (the supervisor's pipe, which
 * bubblewrap passes on): the box is set up and runs.
 *
 * It holds nothing a box process could use: every descriptor but stdio is
 * closed, stdio is /dev/null, and it is not dumpable (a box process cannot
 * ptrace it or open its /proc/PID/fd).
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define READY_FD 14

int main(void) {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, 0);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    (void)!write(READY_FD, "r", 1);
    if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0)
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        if (null > 2)
            close(null);
    }
    /* SIGCHLD stays blocked, so it is pending, never lost, between a
     * reap that found nothing and the wait for the next. */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    for (;;) {
        while (waitpid(-1, 0, WNOHANG) > 0)
            ;
        int sig;
        sigwait(&chld, &sig);
    }
}
