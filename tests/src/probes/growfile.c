/*
 * growfile FILE PAYLOAD: waits until something reads FILE (inotify
 * IN_ACCESS), then appends PAYLOAD's bytes to it: what a hostile box does
 * to a file while `boxctl cp` archives it, so that bytes past the length
 * the archive's header gave become entries of their own. Prints "grew N"
 * when it appended N bytes. Built static by the tests (boxd_tests::probes).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    static char payload[1 << 20];
    int p = open(argv[2], O_RDONLY);
    if (p < 0)
        return 3;
    ssize_t n = read(p, payload, sizeof payload);
    if (n <= 0)
        return 3;
    int in = inotify_init1(0);
    if (in < 0 || inotify_add_watch(in, argv[1], IN_ACCESS) < 0)
        return 4;
    printf("watching\n");
    fflush(stdout);
    char ev[4096];
    if (read(in, ev, sizeof ev) <= 0)
        return 5;
    int f = open(argv[1], O_WRONLY | O_APPEND);
    if (f < 0 || write(f, payload, n) != n)
        return 6;
    printf("grew %zd\n", n);
    return 0;
}
