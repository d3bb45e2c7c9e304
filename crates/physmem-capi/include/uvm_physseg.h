/*
 * uvm_physseg.h: NetBSD's uvm_physseg(9) interface (uvm_hotplug(9)), served
 * by hotkern-physmem: segments of physical page frames that can be plugged
 * and unplugged at run time, with a lock-free lookup from frame number to
 * segment and page descriptor.
 *
 * Written for hotkern; the functions, their names and their meaning follow
 * NetBSD's sys/uvm/uvm_physseg.h so that code written for it builds against
 * this header. Where the behaviour differs, the comment says so.
 *
 * Units, as in NetBSD: segment bounds, uvm_physseg_find and
 * uvm_physseg_plug/unplug work in page frame numbers (PFNs, typed paddr_t
 * all the same); uvm_page_physunload* return a byte address. Pages are
 * 4 KiB; frames must stay below 2^40 (52-bit physical addresses).
 *
 * Build: cargo rustc -p hotkern-physmem-capi --profile capi --crate-type staticlib
 * and link target/capi/libhotkern_physmem_capi.a. The C side provides the
 * four hooks declared at the end of this file.
 *
 * Threads: every function may be called from any thread. Once page init
 * has run, uvm_physseg_find, uvm_physseg_get_* and the walks take no lock;
 * plug, unplug and the setters serialise on an internal spin lock.
 */
#ifndef HOTKERN_UVM_PHYSSEG_H
#define HOTKERN_UVM_PHYSSEG_H

#include <stdbool.h>
#include <stddef.h>
#include <inttypes.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * paddr_t and psize_t are 64 bits here. A kernel that has its own defines
 * HOTKERN_HAVE_PADDR_T before including this header.
 */
#ifndef HOTKERN_HAVE_PADDR_T
typedef uint64_t paddr_t;
typedef uint64_t psize_t;
#endif
_Static_assert(sizeof(paddr_t) == 8 && sizeof(psize_t) == 8,
    "uvm_physseg.h: paddr_t and psize_t must be 64 bits");

/*
 * A segment handle. Its bits mean nothing to C: compare handles with ==,
 * test them with uvm_physseg_valid_p(). A handle keeps naming its segment
 * while other segments come and go and while its own segment shrinks or is
 * split (it then names the lower part); once the segment is gone the handle
 * is invalid (never a different segment's, never a dangling pointer).
 */
typedef uint64_t uvm_physseg_t;

#define PRIxPHYSSEG PRIx64

/* uvm_physseg_valid_p() is false for each of these. */
#define UVM_PHYSSEG_TYPE_INVALID ((uvm_physseg_t)0xffffffffffffffffULL)
/* Asked for a segment where there is none: get_first/get_last of an empty
 * set, get_prev of the first segment. */
#define UVM_PHYSSEG_TYPE_INVALID_EMPTY ((uvm_physseg_t)0xfffffffeffffffffULL)
/* Ran off the end: get_next of the last segment. */
#define UVM_PHYSSEG_TYPE_INVALID_OVERFLOW ((uvm_physseg_t)0xfffffffdffffffffULL)

/* Boot segments uvm_page_physload can hold before page init. */
#define VM_PHYSSEG_MAX 32

/*
 * Page descriptors. struct vm_page is the C side's type; physmem keeps one
 * per frame, HOTKERN_VM_PAGE_SIZE bytes apart and aligned to
 * HOTKERN_VM_PAGE_ALIGN (fixed when the library is built; check with
 * hotkern_physseg_vm_page_size()). C indexes descriptor arrays (pgs[i],
 * pg - pgs), so struct vm_page must be exactly HOTKERN_VM_PAGE_SIZE bytes:
 * pad it, and after its definition write HOTKERN_VM_PAGE_FITS(struct
 * vm_page); to check at compile time. Each descriptor starts zeroed and is
 * initialised by the hook hotkern_physseg_page_init(), then moved into
 * place: the hook must not keep the address it is given.
 *
 * Descriptors of a boot segment are made at page init; those of a plugged
 * segment when a lookup (uvm_physseg_get_pg) first reaches their chunk of
 * 64 frames, possibly on the reader's thread. A segment's descriptors are
 * contiguous: uvm_physseg_get_pg(upm, i) == uvm_physseg_get_pg(upm, 0) + i.
 */
#define HOTKERN_VM_PAGE_SIZE 128
#define HOTKERN_VM_PAGE_ALIGN 16
#define HOTKERN_VM_PAGE_FITS(type)                                            \
	_Static_assert(sizeof(type) == HOTKERN_VM_PAGE_SIZE &&                \
	    _Alignof(type) <= HOTKERN_VM_PAGE_ALIGN,                          \
	    #type " must be HOTKERN_VM_PAGE_SIZE bytes (pad it)")

struct vm_page;
struct pmap_physseg;

/* ---- Boot: before page init ------------------------------------------ */

/* Nothing to do: the segment set is ready before any call. Kept for
 * NetBSD's boot order. It does not empty the set. */
void uvm_physseg_init(void);

/*
 * Registers boot memory: frames [start, end), of which [avail_start,
 * avail_end) may go to the page allocator, for free list free_list (>= 0).
 * All arguments are PFNs. Returns the new segment, or
 * UVM_PHYSSEG_TYPE_INVALID (NetBSD panics) if page init has run, the range
 * is empty, reversed or beyond 2^40 frames, the avail range is not inside
 * it, it overlaps a segment, free_list < 0, or VM_PHYSSEG_MAX segments are
 * loaded already. Segments may be loaded in any order.
 */
uvm_physseg_t uvm_page_physload(paddr_t start, paddr_t end,
    paddr_t avail_start, paddr_t avail_end, int free_list);

/*
 * Takes one page from the segment before page init (pmap bootstrap
 * "stealing"): the first frame if the avail range starts at the segment's
 * start, else the last if it ends at the segment's end. *paddrp gets its
 * BYTE address. False (nothing changes) if page init has run, the segment
 * is not on freelist, neither end is available, the segment would vanish
 * and is the last one, or paddrp is NULL.
 */
bool uvm_page_physunload(uvm_physseg_t upm, int freelist, paddr_t *paddrp);

/* As uvm_page_physunload, but takes the first available frame wherever it
 * is (splitting the segment if needed); freelist is ignored, as in NetBSD. */
bool uvm_page_physunload_force(uvm_physseg_t upm, int freelist,
    paddr_t *paddrp);

/*
 * Moves the segment's avail range bounds (PFNs). NetBSD returns void and
 * checks only under DIAGNOSTIC; here a bound that would leave
 * start <= avail_start <= avail_end <= end returns false and changes
 * nothing. Readers see the new range at once. Each call is one update;
 * a set_avail_start racing a set_avail_end on the same segment may undo
 * the other (NetBSD has no locking here either): serialise them.
 */
bool uvm_physseg_set_avail_start(uvm_physseg_t upm, paddr_t avail_start);
bool uvm_physseg_set_avail_end(uvm_physseg_t upm, paddr_t avail_end);

/*
 * Page init (NetBSD's "init dance" in uvm_page_init): makes the descriptors
 * of every boot segment at once, through hotkern_physseg_alloc and
 * hotkern_physseg_page_init. From here on lookups are lock-free and memory
 * comes from the alloc hook. True if page init has run (now or earlier);
 * false if memory ran out (nothing changed; it may be tried again).
 * A hotkern extension: NetBSD's three boot helpers below reach it too.
 */
bool hotkern_physseg_init_pages(void);

/*
 * NetBSD's uvm_page_init calls these per segment. Here: chomp_slab does
 * nothing (physmem allocates its own descriptor slabs, the caller's array
 * stays the caller's); alloc_from_slab runs page init if needed and returns
 * the segment's descriptor array if pages is its length, NULL otherwise;
 * init_seg runs page init if needed (pgs is not used). Code that then
 * frees the available pages to its allocator walks uvm_physseg_get_pg().
 */
void uvm_physseg_seg_chomp_slab(uvm_physseg_t upm, struct vm_page *pgs,
    size_t n);
struct vm_page *uvm_physseg_seg_alloc_from_slab(uvm_physseg_t upm,
    size_t pages);
void uvm_physseg_init_seg(uvm_physseg_t upm, struct vm_page *pgs);

/* ---- Any time ---------------------------------------------------------- */

/* Whether upm names a live segment. Stricter than NetBSD, whose answer is
 * true for any non-constant handle before page init. */
bool uvm_physseg_valid_p(uvm_physseg_t upm);

/* The segment's frames [start, end) and avail range, as PFNs; (paddr_t)-1
 * for an invalid handle. */
paddr_t uvm_physseg_get_start(uvm_physseg_t upm);
paddr_t uvm_physseg_get_end(uvm_physseg_t upm);
paddr_t uvm_physseg_get_avail_start(uvm_physseg_t upm);
paddr_t uvm_physseg_get_avail_end(uvm_physseg_t upm);

/*
 * The descriptor of the frame idx frames into the segment (idx is a count
 * of frames from uvm_physseg_get_start, not an address). NULL before page
 * init, for an invalid handle or idx >= end - start (NetBSD asserts). The
 * pointer stays valid until the frame is unplugged; after that it is freed
 * once no lookup can reach it.
 */
struct vm_page *uvm_physseg_get_pg(uvm_physseg_t upm, paddr_t idx);

/* Always NULL: physmem keeps no machine-dependent data per segment (a port
 * with __HAVE_PMAP_PHYSSEG keeps it beside, keyed by handle). */
struct pmap_physseg *uvm_physseg_get_pmseg(uvm_physseg_t upm);

/* The free list given to uvm_page_physload (0 for plugged segments);
 * -1 for an invalid handle. */
int uvm_physseg_get_free_list(uvm_physseg_t upm);

/* Where the page allocator starts looking; 0 for an invalid handle. The
 * setter returns false for an invalid handle. */
unsigned int uvm_physseg_get_start_hint(uvm_physseg_t upm);
bool uvm_physseg_set_start_hint(uvm_physseg_t upm, unsigned int start_hint);

/*
 * Walks in address order. get_first/get_last return
 * UVM_PHYSSEG_TYPE_INVALID_EMPTY when there are no segments; get_next of
 * the last returns UVM_PHYSSEG_TYPE_INVALID_OVERFLOW, get_prev of the first
 * UVM_PHYSSEG_TYPE_INVALID_EMPTY; both return UVM_PHYSSEG_TYPE_INVALID for
 * an invalid handle. Before page init they scan the boot segments.
 */
uvm_physseg_t uvm_physseg_get_first(void);
uvm_physseg_t uvm_physseg_get_last(void);
uvm_physseg_t uvm_physseg_get_next(uvm_physseg_t upm);
uvm_physseg_t uvm_physseg_get_prev(uvm_physseg_t upm);

/* The highest frame of any segment (end - 1 of the last); (paddr_t)-1 when
 * there is none (NetBSD reads through a NULL pointer). */
paddr_t uvm_physseg_get_highest_frame(void);

/*
 * The segment holding frame pframe (a PFN), or UVM_PHYSSEG_TYPE_INVALID.
 * If offp is not NULL, *offp gets pframe's offset from the segment's start
 * (in frames); it is left alone on a miss.
 */
uvm_physseg_t uvm_physseg_find(paddr_t pframe, psize_t *offp);

/*
 * Adds pages frames from pfn as a new segment on free list 0, all of them
 * available; *psp (if psp is not NULL) gets its handle. False (nothing
 * changes) if pages is 0, any frame is already in a segment, the range
 * passes 2^40 frames, or memory runs out. Before page init it is a boot
 * segment, as NetBSD's "preload".
 */
bool uvm_physseg_plug(paddr_t pfn, size_t pages, uvm_physseg_t *psp);

/*
 * Removes pages frames from pfn, which must lie inside one segment: all of
 * it, its front, its back, or its middle (the segment splits; its handle
 * keeps the lower part, the upper part gets a new handle). False (nothing
 * changes) otherwise, or when it would remove the last segment (NetBSD
 * panics), or memory for the split runs out.
 */
bool uvm_physseg_unplug(paddr_t pfn, size_t pages);

/* ---- Build facts ------------------------------------------------------- */

/* The library's descriptor size and alignment: compare with
 * HOTKERN_VM_PAGE_SIZE / HOTKERN_VM_PAGE_ALIGN at start-up. */
size_t hotkern_physseg_vm_page_size(void);
size_t hotkern_physseg_vm_page_align(void);

/* ---- Hooks the C side provides ----------------------------------------- */

/* kmem_alloc(size, KM_NOSLEEP) with an alignment (a power of two): returns
 * size bytes aligned to align, or NULL. */
void *hotkern_physseg_alloc(size_t size, size_t align);
/* kmem_free(ptr, size): ptr came from hotkern_physseg_alloc(size, align). */
void hotkern_physseg_free(void *ptr, size_t size, size_t align);
/* Initialises the zeroed descriptor at pg for the frame at BYTE address
 * phys_addr (NetBSD's pgs[i].phys_addr = paddr; VM_MDPAGE_INIT). Called
 * once per descriptor, possibly from a lookup on any thread; must not keep
 * pg (the descriptor is moved after it returns) nor call back into
 * uvm_physseg. */
void hotkern_physseg_page_init(struct vm_page *pg, paddr_t phys_addr);
/* A broken invariant inside the library (a bug, never bad input): the
 * message is not NUL-terminated. Must not return. */
void hotkern_physseg_panic(const char *message, size_t length);

#ifdef __cplusplus
}
#endif

#endif /* HOTKERN_UVM_PHYSSEG_H */
