/*
 * bcache.h - FreeBSD's loader block cache interface, backed by hotkern's
 * cache (libhotkern_bcache_capi.a, crate hotkern-bcache-capi).
 *
 * The five bcache_* functions have the signatures and meanings of FreeBSD's
 * stand/common/bcache.c: a loader calls bcache_init() once, bcache_add_dev()
 * from each driver's init, bcache_allocate() when it opens a disk,
 * bcache_strategy() for each transfer, and bcache_free() on close.
 * Errors are errno values: EIO (5), ENOMEM (12), EINVAL (22), as FreeBSD
 * and Linux number them, or whatever the loader's dv_strategy returned.
 *
 * The loader provides three hooks (bottom of this file): memory, and a
 * function called if the library hits a bug. Nothing unwinds into C.
 * The library keeps global settings (bcache_init, bcache_add_dev) and is
 * not thread-safe; a loader has one thread.
 */
#ifndef HOTKERN_BCACHE_H
#define HOTKERN_BCACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* FreeBSD's daddr_t (int64_t there); a name of its own so that it does not
 * clash with the 32-bit daddr_t some C libraries define. */
typedef int64_t bcache_daddr_t;

/* The operation in bcache_strategy's rw, as FreeBSD's stand.h has them. */
#ifndef F_READ
#define F_READ 0x0001
#endif
#ifndef F_WRITE
#define F_WRITE 0x0002
#endif
#ifndef F_MASK
#define F_MASK 0xFFFF
#endif
/* Accepted and ignored: hotkern decides read-ahead per sequential stream. */
#ifndef F_NORA
#define F_NORA (0x01 << 16)
#endif

/*
 * What a driver passes as bcache_strategy's devdata (FreeBSD's
 * stand/common/bootstrap.h). dv_strategy reads (F_READ) or writes (F_WRITE)
 * size bytes at block blk into or from buf, stores the bytes moved in
 * *rsize and returns 0 or an errno value; a read that runs past the end of
 * the disk moves what it can and says so in *rsize. dv_cache is what
 * bcache_allocate returned, or NULL for no cache.
 */
struct bcache_devdata {
	int (*dv_strategy)(void *devdata, int rw, bcache_daddr_t blk, size_t size,
	    char *buf, size_t *rsize);
	void *dv_devdata;
	void *dv_cache;
};

/* The counters of one cache (what FreeBSD's bcachestat command prints). */
struct bcache_stats {
	uint64_t requests;     /* bcache_strategy calls that reached the cache */
	uint64_t hits;         /* blocks found in the cache */
	uint64_t misses;       /* blocks read from the device */
	uint64_t bypasses;     /* requests sent (in part) straight to the device */
	uint64_t readahead;    /* blocks read ahead */
	uint64_t device_ops;   /* dv_strategy calls */
	uint64_t device_bytes; /* bytes those calls moved */
};

/*
 * Sets the memory all caches share: nblks blocks of bsize bytes. bsize is
 * the block size of blk in bcache_strategy, a power of two from 512 to
 * 4096 (FreeBSD uses 512); with any other, bcache_allocate returns NULL.
 */
void bcache_init(size_t nblks, size_t bsize);

/*
 * Announces devices more devices; each later bcache_allocate takes the
 * bcache_init blocks divided by the device count rounded up to a power of
 * two. Negative counts are ignored.
 */
void bcache_add_dev(int devices);

/*
 * A cache for one device, to put in its bcache_devdata's dv_cache. Falls
 * back to 32 blocks when its share of memory cannot be had; NULL when not
 * even that can, or before a valid bcache_init.
 */
void *bcache_allocate(void);

/* Frees a cache from bcache_allocate. NULL, or a pointer that is not a
 * live cache, is ignored. */
void bcache_free(void *cache);

/*
 * Reads ((rw & F_MASK) == F_READ) or writes (F_WRITE) size bytes at block
 * blk through the cache of devdata (a struct bcache_devdata *); size need
 * not be whole blocks. Stores the bytes moved in *rsize when rsize is not
 * NULL and returns 0; on failure returns the value dv_strategy returned
 * (EIO for a short transfer inside the disk), with nothing of the failed
 * transfer kept in the cache. A read whose read-ahead runs past the end of
 * the disk (the cache does not know its size) is read again straight from
 * dv_strategy, so near the end a read may move fewer bytes, as FreeBSD's
 * does. Writes go through to the device before the cache is updated.
 * Returns EINVAL for a NULL devdata, dv_strategy, or buf with size > 0, a
 * negative blk, an operation other than F_READ or F_WRITE, or a dv_cache
 * that is not a live cache. With dv_cache NULL the request goes straight
 * to dv_strategy. dv_strategy must not call bcache_strategy on the same
 * cache.
 */
int bcache_strategy(void *devdata, int rw, bcache_daddr_t blk, size_t size,
    char *buf, size_t *rsize);

/* Copies the counters of cache to *out: 0, or EINVAL for a NULL out or a
 * cache pointer that is not a live cache. (Not in FreeBSD's interface.) */
int bcache_get_stats(void *cache, struct bcache_stats *out);

/*
 * Provided by the loader. bcache_hook_malloc returns size bytes (any
 * alignment malloc gives) or NULL; bcache_hook_free releases them.
 * bcache_hook_panic receives a message (length bytes, not NUL-terminated)
 * when the library hits a bug, and must not return (print it and halt).
 */
void *bcache_hook_malloc(size_t size);
void bcache_hook_free(void *pointer);
void bcache_hook_panic(const char *message, size_t length);

#ifdef __cplusplus
}
#endif

#endif /* HOTKERN_BCACHE_H */
