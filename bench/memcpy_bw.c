/* The ceiling for a same-host data path: one memcpy of the payload.
 * Prints GB/s for copies of SIZE bytes between two buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	size_t size = argc > 1 ? strtoul(argv[1], NULL, 0) : 65536;
	size_t total = (size_t)4 << 30;
	char *src = malloc(size), *dst = malloc(size);
	if (!src || !dst)
		return 1;
	memset(src, 1, size);
	memset(dst, 2, size);
	size_t iters = total / size;
	double t0 = now();
	for (size_t i = 0; i < iters; i++) {
		memcpy(dst, src, size);
		__asm__ volatile("" : : "r"(dst) : "memory");
	}
	double dt = now() - t0;
	printf("%.2f\n", (double)iters * size / dt / 1e9);
	return 0;
}
