/*
 * sockprobe FAMILY TYPE: tries socket(FAMILY, TYPE, 0) and prints "ok" or
 * "errno N". Built static by the tests (boxd_tests::probe) so that it runs
 * in any box.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    int fd = socket(atoi(argv[1]), atoi(argv[2]), 0);
    if (fd < 0) {
        printf("errno %d\n", errno);
        return 1;
    }
    printf("ok\n");
    return 0;
}
