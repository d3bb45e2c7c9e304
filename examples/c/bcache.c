/*
 * bcache.c - a boot loader's disk reads through the hotkern block cache,
 * with FreeBSD's loader interface (include: crates/bcache-capi/include).
 *
 *   bcache DISK-IMAGE
 *
 * The "driver" reads a disk image with stdio, 512-byte blocks; the loader
 * reads the boot sector, then the first 256 KiB twice in small pieces, as
 * a file system reading its metadata would, and prints what the cache did.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "bcache.h"

#define BLOCK 512

/* What the loader provides: its heap, and a way to stop. */
void *bcache_hook_malloc(size_t size) { return (malloc(size)); }
void bcache_hook_free(void *pointer) { free(pointer); }
void
bcache_hook_panic(const char *message, size_t length)
{
	fprintf(stderr, "bcache: %.*s\n", (int)length, message);
	abort();
}

/* The driver's strategy routine: whole blocks of a disk image. */
static int
image_strategy(void *devdata, int rw, bcache_daddr_t blk, size_t size,
    char *buf, size_t *rsize)
{
	FILE *image = devdata;
	size_t n;

	if ((rw & F_MASK) != F_READ)
		return (EROFS);
	if (fseek(image, (long)(blk * BLOCK), SEEK_SET) != 0)
		return (EIO);
	n = fread(buf, 1, size, image);
	if (rsize != NULL)
		*rsize = n;
	return (n == 0 && size != 0 ? EIO : 0);
}

int
main(int argc, char **argv)
{
	struct bcache_devdata disk = { image_strategy, NULL, NULL };
	struct bcache_stats stats;
	char boot[BLOCK], piece[700];
	size_t got;
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: bcache DISK-IMAGE\n");
		return (2);
	}
	if ((disk.dv_devdata = fopen(argv[1], "rb")) == NULL) {
		perror(argv[1]);
		return (1);
	}

	bcache_init(2048, BLOCK);  /* 1 MiB of cache in all */
	bcache_add_dev(1);         /* one disk shares it */
	if ((disk.dv_cache = bcache_allocate()) == NULL) {
		fprintf(stderr, "no memory for a cache\n");
		return (1);
	}

	rc = bcache_strategy(&disk, F_READ, 0, BLOCK, boot, &got);
	if (rc != 0 || got != BLOCK) {
		fprintf(stderr, "boot sector: error %d\n", rc);
		return (1);
	}
	printf("boot sector: OEM \"%.8s\", signature %02x%02x\n", boot + 3,
	    (unsigned char)boot[510], (unsigned char)boot[511]);

	for (int pass = 1; pass <= 2; pass++) {
		/* 700-byte reads: pieces of blocks, as a FAT reader asks. */
		for (bcache_daddr_t b = 0; b < 512; b += 2) {
			rc = bcache_strategy(&disk, F_READ, b, sizeof(piece), piece, &got);
			if (rc != 0) {
				fprintf(stderr, "block %lld: error %d\n", (long long)b, rc);
				return (1);
			}
		}
		bcache_get_stats(disk.dv_cache, &stats);
		printf("after pass %d: %llu requests, %llu hits, %llu misses, "
		    "%llu device reads\n", pass, (unsigned long long)stats.requests,
		    (unsigned long long)stats.hits, (unsigned long long)stats.misses,
		    (unsigned long long)stats.device_ops);
	}

	bcache_free(disk.dv_cache);
	fclose(disk.dv_devdata);
	return (0);
}
