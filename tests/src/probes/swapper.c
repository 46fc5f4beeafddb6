/*
 * swapper DIR LINK SECONDS: swaps DIR and LINK (a directory and a symlink
 * beside it) with renameat2(RENAME_EXCHANGE) as fast as it can for that
 * long, then prints "swaps N". What a hostile box does while boxd copies
 * its files by path, so that a copier that follows the symlink reads
 * wherever it points on the host. Built static by the tests.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

int main(int argc, char **argv) {
    if (argc != 4)
        return 2;
    time_t end = time(NULL) + atoi(argv[3]);
    long n = 0;
    while (time(NULL) < end) {
        for (int i = 0; i < 1000; i++)
            if (syscall(SYS_renameat2, AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE) == 0)
                n++;
    }
    printf("swaps %ld\n", n);
    return 0;
}
