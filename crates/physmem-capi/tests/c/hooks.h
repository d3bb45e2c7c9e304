/*
 * The hooks uvm_physseg.h asks the C side for, as a user-space test or
 * example provides them: malloc-backed memory that can be told to fail and
 * counts what is live, a struct vm_page with the fields the tests read,
 * and a panic that aborts.
 */
#ifndef HOTKERN_TEST_HOOKS_H
#define HOTKERN_TEST_HOOKS_H

#include <stdio.h>
#include <stdlib.h>

#include "uvm_physseg.h"

#define PAGE_SHIFT 12
#define ctob(frames) ((paddr_t)(frames) << PAGE_SHIFT)

struct vm_page {
	paddr_t phys_addr;
	unsigned int init_count; /* how often the hook ran for this one */
	unsigned int flags;      /* the tests' own use */
	unsigned char md[48];    /* stand-in for VM_MDPAGE */
	/* physmem's stride: pgs[i] must land on descriptor i. */
	unsigned char pad[HOTKERN_VM_PAGE_SIZE - 64];
};
HOTKERN_VM_PAGE_FITS(struct vm_page);

/* Allocations still to succeed before they fail; negative: never fail. */
static long allocations_left = -1;
static size_t live_bytes;

void *
hotkern_physseg_alloc(size_t size, size_t align)
{
	if (allocations_left == 0)
		return NULL;
	if (allocations_left > 0)
		allocations_left--;
	/* aligned_alloc wants a multiple of the alignment. */
	void *memory = aligned_alloc(align, (size + align - 1) / align * align);
	if (memory != NULL)
		live_bytes += size;
	return memory;
}

void
hotkern_physseg_free(void *ptr, size_t size, size_t align)
{
	(void)align;
	live_bytes -= size;
	free(ptr);
}

void
hotkern_physseg_page_init(struct vm_page *pg, paddr_t phys_addr)
{
	pg->phys_addr = phys_addr;
	pg->init_count++;
}

void
hotkern_physseg_panic(const char *message, size_t length)
{
	fprintf(stderr, "hotkern_physseg_panic: %.*s\n", (int)length, message);
	abort();
}

#endif /* HOTKERN_TEST_HOOKS_H */
