/* Baseline for a same-host data path: the best one memcpy of the payload
 * does on this machine. Page-aligned source and destination (a destination
 * off the source's alignment can send glibc down a slower path), warm
 * buffers reused on every copy, so 64 KiB stays cache-resident and 1 MiB
 * measures a large copy.
 *   memcpy_bw SIZE...      prints "SIZE GB/s" per size (GB = 10^9 bytes),
 *                          the best of several trials */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

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

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s SIZE...\n", argv[0]);
		return 2;
	}
	for (int a = 1; a < argc; a++) {
		size_t size = strtoul(argv[a], NULL, 0);
		if (size == 0)
			return 2;
		char *src = page_buf(size), *dst = page_buf(size);
		memset(src, 1, size);
		memset(dst, 2, size);
		/* About 1 GiB per trial; the best of 15 trials after a warm-up. */
		size_t iters = ((size_t)1 << 30) / size;
		if (iters < 64)
			iters = 64;
		double best = 0;
		for (int trial = -1; trial < 15; trial++) {
			double t0 = now();
			for (size_t i = 0; i < iters; i++) {
				memcpy(dst, src, size);
				__asm__ volatile("" : : "r"(dst), "r"(src) : "memory");
			}
			double gbs = (double)iters * size / (now() - t0) / 1e9;
			if (trial >= 0 && gbs > best)
				best = gbs;
		}
		if (dst[size - 1] != 1)
			return 1;
		printf("%zu %.2f\n", size, best);
		munmap(src, size);
		munmap(dst, size);
	}
	return 0;
}
