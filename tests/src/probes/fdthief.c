/*
 * fdthief SECONDS: for that long, tries to take descriptors 3..31 of
 * every other process it can see (pidfd_open, pidfd_getfd) and prints one
 * line per socket of type SOCK_SEQPACKET it got ("stole PID FD": the kind
 * of socket a box's zygote talks to its supervisor on), then "tries N
 * denied D got G". What a hostile box does while its commands are being
 * set up. Built static by the tests.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    time_t end = time(NULL) + atoi(argv[1]);
    long tries = 0, denied = 0, got = 0;
    pid_t self = getpid();
    while (time(NULL) < end) {
        DIR *d = opendir("/proc");
        if (!d)
            return 3;
        struct dirent *e;
        while ((e = readdir(d))) {
            int pid = atoi(e->d_name);
            if (pid <= 1 || pid == self)
                continue;
            int pfd = syscall(SYS_pidfd_open, pid, 0);
            if (pfd < 0)
                continue;
            for (int fd = 3; fd < 32; fd++) {
                tries++;
                int t = syscall(SYS_pidfd_getfd, pfd, fd, 0);
                if (t < 0) {
                    if (errno == EPERM)
                        denied++;
                    continue;
                }
                got++;
                int type = 0;
                socklen_t len = sizeof type;
                if (getsockopt(t, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_SEQPACKET)
                    printf("stole %d %d\n", pid, fd);
                close(t);
            }
            close(pfd);
        }
        closedir(d);
    }
    printf("tries %ld denied %ld got %ld\n", tries, denied, got);
    return 0;
}
