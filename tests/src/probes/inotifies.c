/*
 * inotifies N [HOLD]: opens up to N inotify instances and prints how many
 * it got ("got K", and the errno that stopped it); with HOLD, keeps them
 * open that many seconds. What a box does to exhaust the instances the
 * kernel counts for its owner. Built static by the tests.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    int n = atoi(argv[1]), k = 0, err = 0;
    for (; k < n; k++) {
        if (inotify_init1(IN_CLOEXEC) < 0) {
            err = errno;
            break;
        }
    }
    printf("got %d errno %d\n", k, err);
    fflush(stdout);
    if (argc > 2)
        sleep(atoi(argv[2]));
    return 0;
}
