/*
 * Linux's side of `hotkern bench memory --platform qemu`: the owners of
 * memory that Linux must move out of the way when the host shrinks its
 * virtio-mem device, as the hotkern kernel's owners do for `--fill`.
 *
 *     memory-fill REGION_MIB KEEP_MIB SHRINK_MIB SEED
 *
 * It reads MemTotal, says it is waiting (the host plugs REGION_MIB then),
 * waits until MemTotal grew by the region (onlined, movable with
 * `memhp_default_state=online_movable`), maps the region's size of
 * anonymous memory in 4 KiB pages (no transparent huge pages: the
 * hotkern kernel's frames are 4 KiB), writes every page, and gives back
 * all but KEEP_MIB of them, picked at random, so that the pages kept are
 * spread over every block of the region. It says it is filled (the host
 * shrinks then), waits until MemTotal fell by SHRINK_MIB, and prints how
 * many pages Linux migrated meanwhile (/proc/vmstat's pgmigrate_success)
 * and how many of its kept pages still hold what it wrote. It then keeps
 * its memory until QEMU quits. Lines it prints:
 *
 *     hotkern-linux: fill waiting MEMTOTAL_KB
 *     hotkern-linux: fill filled KEPT_PAGES
 *     hotkern-linux: fill shrunk MIGRATED INTACT KEPT_PAGES
 *     hotkern-linux: error WHAT
 *
 * Built with `cc -static -O2` on the host: the initramfs has no C
 * library. Plain anonymous memory, not mlock(2)ed: locked pages may not
 * be migrated off memory being unplugged.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL

static void fail(const char *what)
{
	printf("hotkern-linux: error memory-fill: %s\n", what);
	fflush(stdout);
	exit(1);
}

/* The number after `key` in `path` (a "key value" per line file). */
static long long field(const char *path, const char *key)
{
	char line[256];
	size_t length = strlen(key);
	long long value = -1;
	FILE *file = fopen(path, "r");
	if (!file)
		fail(path);
	while (fgets(line, sizeof line, file)) {
		if (strncmp(line, key, length) == 0 &&
		    (line[length] == ' ' || line[length] == ':')) {
			value = strtoll(line + length + 1, NULL, 10);
			break;
		}
	}
	fclose(file);
	if (value < 0)
		fail(key);
	return value;
}

static long long memory_total_kb(void)
{
	return field("/proc/meminfo", "MemTotal");
}

static void nap(long milliseconds)
{
	struct timespec pause = { milliseconds / 1000, (milliseconds % 1000) * 1000000L };
	nanosleep(&pause, NULL);
}

/* xorshift64*: the pages given back, reproducible from the seed. */
static uint64_t next(uint64_t *state)
{
	*state ^= *state >> 12;
	*state ^= *state << 25;
	*state ^= *state >> 27;
	return *state * 0x2545F4914F6CDD1DULL;
}

/* What page `index` holds: differs from page to page and run to run. */
static uint64_t pattern(uint64_t index, uint64_t seed)
{
	return (index + 1) * 0x9E3779B97F4A7C15ULL ^ seed;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: memory-fill REGION_MIB KEEP_MIB SHRINK_MIB SEED\n");
		return 2;
	}
	long long region_mib = atoll(argv[1]), keep_mib = atoll(argv[2]);
	long long shrink_mib = atoll(argv[3]);
	uint64_t seed = strtoull(argv[4], NULL, 0) | 1;
	if (region_mib <= 0 || keep_mib < 0 || keep_mib > region_mib || shrink_mib <= 0 ||
	    shrink_mib > region_mib)
		fail("sizes out of range");
	setvbuf(stdout, NULL, _IOLBF, 0);

	long long before = memory_total_kb();
	printf("hotkern-linux: fill waiting %lld\n", before);
	for (int waited = 0; memory_total_kb() < before + region_mib * 1024; waited++) {
		if (waited == 12000)
			fail("the region was not onlined within 120 s");
		nap(10);
	}

	size_t pages = (size_t)region_mib * (1UL << 20) / PAGE;
	size_t kept = (size_t)keep_mib * (1UL << 20) / PAGE;
	unsigned char *memory = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE,
				     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (memory == MAP_FAILED)
		fail("mmap");
	madvise(memory, pages * PAGE, MADV_NOHUGEPAGE);
	for (size_t index = 0; index < pages; index++)
		*(uint64_t *)(memory + index * PAGE) = pattern(index, seed);

	/* A random permutation's first `pages - kept` are given back. */
	uint32_t *order = malloc(pages * sizeof *order);
	unsigned char *keeps = malloc(pages);
	if (!order || !keeps)
		fail("malloc");
	for (size_t index = 0; index < pages; index++) {
		order[index] = (uint32_t)index;
		keeps[index] = 1;
	}
	uint64_t state = seed;
	for (size_t index = pages - 1; index > 0; index--) {
		size_t other = next(&state) % (index + 1);
		uint32_t swap = order[index];
		order[index] = order[other];
		order[other] = swap;
	}
	for (size_t index = 0; index < pages - kept; index++) {
		size_t page = order[index];
		keeps[page] = 0;
		if (madvise(memory + page * PAGE, PAGE, MADV_DONTNEED) != 0)
			fail("madvise");
	}
	free(order);

	long long migrated_before = field("/proc/vmstat", "pgmigrate_success");
	long long filled = memory_total_kb();
	printf("hotkern-linux: fill filled %zu\n", kept);
	while (memory_total_kb() > filled - shrink_mib * 1024)
		nap(10);

	long long migrated = field("/proc/vmstat", "pgmigrate_success") - migrated_before;
	size_t intact = 0;
	for (size_t index = 0; index < pages; index++)
		if (keeps[index] &&
		    *(uint64_t *)(memory + index * PAGE) == pattern(index, seed))
			intact++;
	printf("hotkern-linux: fill shrunk %lld %zu %zu\n", migrated, intact, kept);
	for (;;)
		pause();
}
