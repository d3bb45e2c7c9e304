/*
 * t_bcache.c - the bcache C interface over a FAT16 image, byte-exact.
 *
 *   t_bcache IMAGE DIR
 *
 * IMAGE is a FAT16 volume (512-byte sectors) made by scripts/check-c-bcache
 * with mkfs.fat and mcopy; DIR holds the host copies of the files in its
 * root directory. The test walks the root directory and each file's
 * cluster chain itself, reading everything through bcache_strategy, and
 * compares every file with its host copy; then it compares random regions
 * of the image read through the cache with the image's bytes, and checks
 * the failure cases: device errors, bad arguments, reads past the end.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bcache.h"

#define BLOCK 512

static int failures;

#define CHECK(cond)                                                         \
	do {                                                                \
		if (!(cond)) {                                              \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n",        \
			    __FILE__, __LINE__, #cond);                     \
			failures++;                                         \
		}                                                           \
	} while (0)

/* The hooks: the C heap, counting live blocks so that leaks show. */
static long live_blocks;
static long blocks_ever;

void *
bcache_hook_malloc(size_t size)
{
	void *p = malloc(size);

	if (p != NULL) {
		live_blocks++;
		blocks_ever++;
	}
	return (p);
}

void
bcache_hook_free(void *pointer)
{
	if (pointer != NULL)
		live_blocks--;
	free(pointer);
}

void
bcache_hook_panic(const char *message, size_t length)
{
	fprintf(stderr, "bcache panic: %.*s\n", (int)length, message);
	abort();
}

/* The disk: the image in memory, with blocks that can be made to fail. */
struct disk {
	unsigned char *bytes;
	size_t blocks;
	int64_t fail_first, fail_end; /* blocks [first, end) give EIO */
	unsigned long calls;
};

static int
disk_strategy(void *devdata, int rw, bcache_daddr_t blk, size_t size,
    char *buf, size_t *rsize)
{
	struct disk *d = devdata;
	size_t at, n;

	d->calls++;
	if (rsize != NULL)
		*rsize = 0;
	if (blk < d->fail_end && blk + (int64_t)((size + BLOCK - 1) / BLOCK) >
	    d->fail_first) {
		/* A failing read leaves garbage behind, as real ones may. */
		if ((rw & F_MASK) == F_READ)
			memset(buf, 0xEE, size);
		return (EIO);
	}
	if (blk < 0 || (size_t)blk >= d->blocks)
		return (EIO);
	at = (size_t)blk * BLOCK;
	n = d->blocks * BLOCK - at;
	if (n > size)
		n = size;
	if ((rw & F_MASK) == F_READ)
		memcpy(buf, d->bytes + at, n);
	else
		memcpy(d->bytes + at, buf, n);
	if (rsize != NULL)
		*rsize = n;
	return (0);
}

static struct disk disk = { .fail_first = -1, .fail_end = -1 };
static struct bcache_devdata dev = { .dv_strategy = disk_strategy,
	.dv_devdata = &disk };

/* Reads len bytes at byte offset `at` through the cache. */
static int
read_bytes(uint64_t at, size_t len, unsigned char *out)
{
	size_t skip = at % BLOCK, got = 0;
	unsigned char *tmp = malloc(skip + len + 1);
	int rc;

	if (tmp == NULL)
		abort();
	rc = bcache_strategy(&dev, F_READ, (bcache_daddr_t)(at / BLOCK),
	    skip + len, (char *)tmp, &got);
	if (rc == 0 && got == skip + len)
		memcpy(out, tmp + skip, len);
	else if (rc == 0)
		rc = EIO;
	free(tmp);
	return (rc);
}

static unsigned
le16(const unsigned char *p)
{
	return (p[0] | p[1] << 8);
}

static uint32_t
le32(const unsigned char *p)
{
	return (p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24);
}

static unsigned char *
slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *data;
	long n;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0) {
		perror(path);
		exit(2);
	}
	rewind(f);
	data = malloc((size_t)n + 1);
	if (data == NULL || fread(data, 1, (size_t)n, f) != (size_t)n) {
		perror(path);
		exit(2);
	}
	fclose(f);
	*len = (size_t)n;
	return (data);
}

/* Walks the FAT16 root directory and compares every file with DIR/NAME. */
static int
compare_fat_files(const char *dir)
{
	unsigned char boot[BLOCK], entry[32];
	unsigned sector, per_cluster, reserved, fats, root_entries, fat_sectors;
	uint64_t fat_at, root_at, data_at, cluster_bytes;
	int files = 0;

	CHECK(read_bytes(0, BLOCK, boot) == 0);
	sector = le16(boot + 11);
	per_cluster = boot[13];
	reserved = le16(boot + 14);
	fats = boot[16];
	root_entries = le16(boot + 17);
	fat_sectors = le16(boot + 22);
	CHECK(sector == BLOCK && boot[510] == 0x55 && boot[511] == 0xAA);
	fat_at = (uint64_t)reserved * sector;
	root_at = fat_at + (uint64_t)fats * fat_sectors * sector;
	data_at = root_at + (uint64_t)root_entries * 32;
	cluster_bytes = (uint64_t)per_cluster * sector;

	for (unsigned i = 0; i < root_entries; i++) {
		char name[13], path[4096];
		unsigned char *want, *got;
		size_t want_len, k = 0, size, done = 0;
		unsigned cluster;

		CHECK(read_bytes(root_at + 32 * i, 32, entry) == 0);
		if (entry[0] == 0)
			break;
		/* Deleted, long-name pieces, the label, directories. */
		if (entry[0] == 0xE5 || entry[11] == 0x0F || (entry[11] & 0x18))
			continue;
		for (int j = 0; j < 8 && entry[j] != ' '; j++)
			name[k++] = (char)entry[j];
		if (entry[8] != ' ') {
			name[k++] = '.';
			for (int j = 8; j < 11 && entry[j] != ' '; j++)
				name[k++] = (char)entry[j];
		}
		name[k] = '\0';
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		want = slurp(path, &want_len);
		size = le32(entry + 28);
		cluster = le16(entry + 26);
		CHECK(size == want_len);
		got = malloc(size + 1);
		/* Each cluster in pieces of varying sizes, through the cache. */
		while (done < size && cluster >= 2 && cluster < 0xFFF8) {
			uint64_t base = data_at + (cluster - 2) * cluster_bytes;
			size_t in = 0, piece = 1 + (done / 7) % 3000;
			unsigned char link[2];

			while (in < cluster_bytes && done < size) {
				size_t n = piece;
				if (n > cluster_bytes - in)
					n = cluster_bytes - in;
				if (n > size - done)
					n = size - done;
				CHECK(read_bytes(base + in, n, got + done) == 0);
				in += n;
				done += n;
			}
			CHECK(read_bytes(fat_at + 2 * (uint64_t)cluster, 2, link) == 0);
			cluster = le16(link);
		}
		CHECK(done == size);
		if (memcmp(got, want, size) != 0) {
			fprintf(stderr, "%s differs from its copy\n", name);
			failures++;
		}
		printf("  %-12s %8zu bytes match\n", name, size);
		files++;
		free(got);
		free(want);
	}
	return (files);
}

static void
compare_regions(unsigned seed)
{
	size_t total = disk.blocks * BLOCK;
	unsigned char *buf = malloc(4 << 20);

	srand(seed);
	for (int i = 0; i < 3000; i++) {
		size_t blk = (size_t)rand() % disk.blocks, size, got = 99;
		int big = rand() % 50 == 0;

		size = big ? (size_t)rand() % (3 << 20) : (size_t)rand() % 9000;
		if (blk * BLOCK + size > total)
			size = total - blk * BLOCK;
		CHECK(bcache_strategy(&dev, F_READ, (bcache_daddr_t)blk, size,
		    (char *)buf, &got) == 0);
		CHECK(got == size);
		if (memcmp(buf, disk.bytes + blk * BLOCK, size) != 0) {
			fprintf(stderr, "region %zu+%zu differs\n", blk, size);
			failures++;
		}
	}
	free(buf);
}

/* The failure cases, on a fresh cache so that nothing is cached yet. */
static void
check_failures(void)
{
	void *cache = bcache_allocate();
	unsigned char buf[4096], want[4096];
	size_t got = 12345;
	struct bcache_stats before, after;
	struct bcache_devdata no_strategy = { NULL, &disk, NULL };
	struct bcache_devdata not_a_cache = { disk_strategy, &disk, &disk };
	int64_t far = (int64_t)disk.blocks - 1000;

	CHECK(cache != NULL);
	if (cache == NULL)
		return;
	dev.dv_cache = cache;
	no_strategy.dv_cache = cache;

	/* A device error comes back as EIO and leaves nothing cached. */
	disk.fail_first = far;
	disk.fail_end = far + 4;
	CHECK(bcache_strategy(&dev, F_READ, far, 4096, (char *)buf, &got) == EIO);
	CHECK(got == 0);
	disk.fail_first = disk.fail_end = -1;
	CHECK(bcache_get_stats(cache, &before) == 0);
	CHECK(bcache_strategy(&dev, F_READ, far, 4096, (char *)buf, &got) == 0);
	CHECK(bcache_get_stats(cache, &after) == 0);
	CHECK(got == 4096 && memcmp(buf, disk.bytes + far * BLOCK, 4096) == 0);
	CHECK(after.misses > before.misses);
	CHECK(after.device_ops > before.device_ops);

	/* Bad arguments: EINVAL, and the device is never called. */
	unsigned long calls = disk.calls;
	CHECK(bcache_strategy(NULL, F_READ, 0, 512, (char *)buf, &got) == EINVAL);
	CHECK(bcache_strategy(&no_strategy, F_READ, 0, 512, (char *)buf, &got) == EINVAL);
	CHECK(bcache_strategy(&not_a_cache, F_READ, 0, 512, (char *)buf, &got) == EINVAL);
	CHECK(bcache_strategy(&dev, F_READ, -1, 512, (char *)buf, &got) == EINVAL);
	CHECK(bcache_strategy(&dev, F_READ, INT64_MAX, 1024, (char *)buf, &got) == EINVAL);
	CHECK(bcache_strategy(&dev, F_READ, 0, 512, NULL, &got) == EINVAL);
	CHECK(bcache_strategy(&dev, 0, 0, 512, (char *)buf, &got) == EINVAL);
	CHECK(bcache_strategy(&dev, F_READ | F_WRITE, 0, 512, (char *)buf, &got) == EINVAL);
	CHECK(bcache_get_stats(cache, NULL) == EINVAL);
	CHECK(bcache_get_stats(&disk, &after) == EINVAL);
	CHECK(disk.calls == calls);
	/* Zero bytes, a NULL rsize and F_NORA are fine. */
	CHECK(bcache_strategy(&dev, F_READ, 0, 0, NULL, &got) == 0 && got == 0);
	CHECK(bcache_strategy(&dev, F_READ | F_NORA, 1, 512, (char *)buf, NULL) == 0);
	CHECK(memcmp(buf, disk.bytes + 512, 512) == 0);

	/* Reads at the end of the disk: what there is, then EIO. */
	got = 0;
	CHECK(bcache_strategy(&dev, F_READ, (int64_t)disk.blocks - 1, 1024,
	    (char *)buf, &got) == 0);
	CHECK(got == 512);
	CHECK(memcmp(buf, disk.bytes + (disk.blocks - 1) * BLOCK, 512) == 0);
	CHECK(bcache_strategy(&dev, F_READ, (int64_t)disk.blocks, 512,
	    (char *)buf, &got) == EIO);

	/* A write of part of a block goes to the disk and to later reads;
	 * a failed write changes neither the cache nor the disk. */
	memcpy(want, disk.bytes + 40 * BLOCK, 1024);
	memset(want + 100, 0x5A, 300);
	CHECK(bcache_strategy(&dev, F_READ, 40, 1024, (char *)buf, &got) == 0);
	CHECK(read_bytes(40 * BLOCK, 1024, buf) == 0);
	unsigned char patch[400];
	memset(patch, 0x5A, sizeof(patch));
	memcpy(buf, disk.bytes + 40 * BLOCK, 100);
	memcpy(buf + 100, patch, 300);
	CHECK(bcache_strategy(&dev, F_WRITE, 40, 400, (char *)buf, &got) == 0);
	CHECK(got == 400);
	CHECK(memcmp(disk.bytes + 40 * BLOCK, want, 1024) == 0);
	CHECK(read_bytes(40 * BLOCK, 1024, buf) == 0 && memcmp(buf, want, 1024) == 0);
	disk.fail_first = 40;
	disk.fail_end = 41;
	memset(buf, 0x11, 512);
	CHECK(bcache_strategy(&dev, F_WRITE, 40, 512, (char *)buf, &got) == EIO);
	disk.fail_first = disk.fail_end = -1;
	CHECK(memcmp(disk.bytes + 40 * BLOCK, want, 512) == 0);
	CHECK(read_bytes(40 * BLOCK, 1024, buf) == 0 && memcmp(buf, want, 1024) == 0);

	/* A block size the cache cannot use: no cache. */
	bcache_init(2048, 1000);
	CHECK(bcache_allocate() == NULL);
	bcache_init(2048, BLOCK);
	bcache_free(NULL);
	bcache_free(&disk);
	dev.dv_cache = NULL;
	bcache_free(cache);
}

int
main(int argc, char **argv)
{
	size_t len;
	void *cache;
	int files;
	struct bcache_stats stats;

	if (argc != 3) {
		fprintf(stderr, "usage: t_bcache IMAGE DIR\n");
		return (2);
	}
	disk.bytes = slurp(argv[1], &len);
	disk.blocks = len / BLOCK;

	/* 1 MiB of cache for one disk: smaller than the largest file. */
	bcache_init(2048, BLOCK);
	bcache_add_dev(1);
	cache = bcache_allocate();
	CHECK(cache != NULL);
	if (cache == NULL)
		return (1);
	dev.dv_cache = cache;

	files = compare_fat_files(argv[2]);
	CHECK(files >= 3);
	CHECK(bcache_get_stats(cache, &stats) == 0);
	CHECK(stats.hits > stats.misses);
	printf("  FAT files: %d, %llu hits, %llu misses, %llu device calls\n",
	    files, (unsigned long long)stats.hits,
	    (unsigned long long)stats.misses, (unsigned long long)stats.device_ops);

	compare_regions(1);
	bcache_free(cache);
	check_failures();

	CHECK(blocks_ever > 0);
	CHECK(live_blocks == 0);
	if (failures != 0) {
		fprintf(stderr, "t_bcache: %d checks failed\n", failures);
		return (1);
	}
	printf("t_bcache: all checks passed\n");
	return (0);
}
