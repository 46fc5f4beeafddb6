/*
 * The long-lived first process of a namespace box. bubblewrap's own pid 1
 * reaps orphans and keeps the namespaces alive while this process lives;
 * this process only has to exist, ignoring every signal but SIGKILL, until
 * the box is stopped. It is built static so that it runs in any image
 * (even one without a libc) and is executed from a sealed memfd, so it
 * leaves no file in the box.
 *
 * It holds nothing a box process could use: every descriptor but stdio is
 * closed, stdio is /dev/null, and it is not dumpable (a box process cannot
 * ptrace it or open its /proc/PID/fd).
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void) {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, 0);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
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
    for (;;)
        pause();
}
