/*
 * The long-lived first process of a namespace box. bubblewrap's own pid 1
 * reaps orphans and keeps the namespaces alive while this process lives;
 * this process only has to exist, ignoring every signal but SIGKILL, until
 * the box is stopped. It is built static so that it runs in any image
 * (even one without a libc) and is executed from a sealed memfd, so it
 * leaves no file in the box.
 */
#include <signal.h>
#include <unistd.h>

int main(void) {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, 0);
    for (;;)
        pause();
}
