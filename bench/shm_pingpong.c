/* The floor for any same-host latency: two processes bounce a counter
 * through a MAP_SHARED page, each busy-polling its own cache line, pinned
 * to different CPUs when there are two. Prints the one-way latency in
 * microseconds (round trip / 2): the median over batches of round trips.
 *   shm_pingpong [ROUND_TRIPS] */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct shared {
	_Alignas(64) volatile uint64_t ping;
	_Alignas(64) volatile uint64_t pong;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void pin(int nth)
{
	cpu_set_t allowed, one;
	if (sched_getaffinity(0, sizeof allowed, &allowed) || CPU_COUNT(&allowed) < 2)
		return;
	for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed))
			continue;
		if (seen++ == nth) {
			CPU_ZERO(&one);
			CPU_SET(cpu, &one);
			sched_setaffinity(0, sizeof one, &one);
			return;
		}
	}
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	long total = argc > 1 ? atol(argv[1]) : 1000000;
	enum { BATCH = 1000 };
	long batches = total / BATCH, warm = 20000;
	if (batches < 1)
		batches = 1;
	struct shared *s = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	uint64_t last = (uint64_t)(warm + batches * BATCH);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		pin(1);
		for (uint64_t i = 1; i <= last; i++) {
			while (s->ping != i)
				;
			s->pong = i;
		}
		_exit(0);
	}
	pin(0);
	double *means = malloc(batches * sizeof *means);
	uint64_t i = 1;
	for (; i <= (uint64_t)warm; i++) {
		s->ping = i;
		while (s->pong != i)
			;
	}
	for (long b = 0; b < batches; b++) {
		double t0 = now();
		for (int k = 0; k < BATCH; k++, i++) {
			s->ping = i;
			while (s->pong != i)
				;
		}
		means[b] = (now() - t0) / BATCH;
	}
	waitpid(pid, NULL, 0);
	qsort(means, batches, sizeof *means, cmp);
	printf("%.3f\n", means[batches / 2] / 2 * 1e6);
	return 0;
}
