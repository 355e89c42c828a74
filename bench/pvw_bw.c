/* Baseline for a same-host data path between two processes: the kernel's
 * one-copy cross-process write. A parent writes into its forked child's
 * buffer with process_vm_writev; both buffers page-aligned, reused warm.
 *   pvw_bw SIZE...         prints "SIZE GB/s" per size (GB = 10^9 bytes),
 *                          the best of several trials */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *page_buf(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	return p;
}

static int run(size_t size)
{
	int to_parent[2], to_child[2];
	if (pipe(to_parent) || pipe(to_child)) {
		perror("pipe");
		return 1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		/* The target: its own fresh buffer (not shared copy-on-write
		 * with the parent), its address to the parent, then wait. */
		char *dst = page_buf(size);
		memset(dst, 2, size);
		uintptr_t addr = (uintptr_t)dst;
		char done;
		if (write(to_parent[1], &addr, sizeof addr) != sizeof addr)
			_exit(1);
		if (read(to_child[0], &done, 1) != 1)
			_exit(1);
		_exit(dst[0] == 1 && dst[size - 1] == 1 ? 0 : 3);
	}
	uintptr_t addr;
	if (read(to_parent[0], &addr, sizeof addr) != sizeof addr) {
		fprintf(stderr, "no address from the child\n");
		return 1;
	}
	char *src = page_buf(size);
	memset(src, 1, size);
	struct iovec local = { src, size }, remote = { (void *)addr, size };
	size_t iters = ((size_t)1 << 30) / size;
	if (iters < 64)
		iters = 64;
	double best = 0;
	for (int trial = -1; trial < 7; trial++) {
		double t0 = now();
		for (size_t i = 0; i < iters; i++) {
			ssize_t n = process_vm_writev(pid, &local, 1, &remote, 1, 0);
			if (n != (ssize_t)size) {
				perror("process_vm_writev");
				kill(pid, SIGKILL);
				waitpid(pid, NULL, 0);
				return 1;
			}
		}
		double gbs = (double)iters * size / (now() - t0) / 1e9;
		if (trial >= 0 && gbs > best)
			best = gbs;
	}
	char done = 1;
	int status;
	if (write(to_child[1], &done, 1) != 1 || waitpid(pid, &status, 0) != pid ||
	    !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "the child did not see the data\n");
		return 1;
	}
	printf("%zu %.2f\n", size, best);
	munmap(src, size);
	close(to_parent[0]); close(to_parent[1]);
	close(to_child[0]); close(to_child[1]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s SIZE...\n", argv[0]);
		return 2;
	}
	for (int a = 1; a < argc; a++) {
		size_t size = strtoul(argv[a], NULL, 0);
		if (size == 0 || run(size))
			return 1;
	}
	return 0;
}
