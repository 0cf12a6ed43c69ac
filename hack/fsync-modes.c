/* fdatasync after a write, on three kinds of file (docs/benchmarks.md, "What bounds 8 KB sync"):
 *   mode 0: appended (each write allocates its blocks)
 *   mode 1: reserved ahead with fallocate(FALLOC_FL_KEEP_SIZE), as levee's journal is
 *   mode 2: written over (the blocks written and synced before, the length unchanged; written
 *           in 1 MiB writes, so on Linux 6.16+ ext4 the page cache holds them in large folios)
 * Prints the mean time of one write + fdatasync and the slowest.
 *   gcc -O2 -o /tmp/fsync-modes hack/fsync-modes.c
 *   /tmp/fsync-modes MODE CHUNK_BYTES ROUNDS FILE    e.g. /tmp/fsync-modes 1 131072 1500 /work/f.dat
 * FILE is created, and removed at the end; put it on the filesystem to measure (not a tmpfs). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void must(int ok, const char *what) {
    if (!ok) { perror(what); exit(1); }
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODE(0|1|2) CHUNK_BYTES ROUNDS FILE\n", argv[0]);
        return 2;
    }
    int mode = atoi(argv[1]), chunk = atoi(argv[2]), rounds = atoi(argv[3]);
    const char *path = argv[4];
    must(mode >= 0 && mode <= 2 && chunk > 0 && chunk <= (1 << 20) && rounds > 0, "arguments");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    must(fd >= 0, "open");
    long total = (long)chunk * rounds;
    char *buf = malloc(1 << 20);
    must(buf != NULL, "malloc");
    memset(buf, 0xab, 1 << 20);
    if (mode == 1) must(fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, total) == 0, "fallocate");
    if (mode == 2) {
        for (long o = 0; o < total; o += 1 << 20)
            must(pwrite(fd, buf, 1 << 20, o) == 1 << 20, "pwrite");
        must(fsync(fd) == 0, "fsync");
    }
    double start = now(), slowest = 0;
    for (int i = 0; i < rounds; i++) {
        must(pwrite(fd, buf, chunk, (long)i * chunk) == chunk, "pwrite");
        double t = now();
        must(fdatasync(fd) == 0, "fdatasync");
        double took = now() - t;
        if (took > slowest) slowest = took;
    }
    printf("mode %d chunk %d: %.3f ms per write+fdatasync, max %.2f ms\n", mode, chunk,
           (now() - start) / rounds * 1e3, slowest * 1e3);
    close(fd);
    unlink(path);
    return 0;
}
