/* Guest helper of tests/nfsvm/kernel-client-v4.sh and kernel-client-nlm.sh: takes a
 * POSIX (fcntl) byte-range lock and holds it, so two processes of one guest can be
 * made to conflict.
 *
 *   fcntl-lock FILE r|w|R|W START LEN HOLD_SECONDS
 *
 * R and W wait for the lock (F_SETLKW) instead of failing at once.
 * Prints "locked" (then holds the lock HOLD_SECONDS and exits 0, closing the file) or
 * "busy" (exit 1: another process holds a conflicting lock; F_GETLK's holder range is
 * printed too). Any other failure exits 2. Built statically by the test. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: fcntl-lock FILE r|w|R|W START LEN HOLD_SECONDS\n");
        return 2;
    }
    int write = argv[2][0] == 'w' || argv[2][0] == 'W';
    int wait = argv[2][0] == 'R' || argv[2][0] == 'W';
    int fd = open(argv[1], write ? O_RDWR : O_RDONLY);
    if (fd < 0) {
        perror("open");
        return 2;
    }
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = write ? F_WRLCK : F_RDLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = atoll(argv[3]);
    fl.l_len = atoll(argv[4]);
    if (fcntl(fd, wait ? F_SETLKW : F_SETLK, &fl) == 0) {
        printf("locked\n");
        fflush(stdout);
        sleep(atoi(argv[5]));
        close(fd);
        return 0;
    }
    if (errno != EACCES && errno != EAGAIN) {
        perror("fcntl F_SETLK");
        return 2;
    }
    struct flock q = fl;
    if (fcntl(fd, F_GETLK, &q) == 0 && q.l_type != F_UNLCK)
        printf("busy %s %lld %lld\n", q.l_type == F_WRLCK ? "w" : "r",
               (long long)q.l_start, (long long)q.l_len);
    else
        printf("busy\n");
    return 1;
}
