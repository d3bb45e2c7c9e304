/*
 * What a boot path written in C does with hotkern-physmem through NetBSD's
 * uvm_physseg.h: load the usable RAM of a firmware memory map (e820-like,
 * in bytes), steal a page for early page tables, run page init, hot-plug a
 * DIMM, look frames up and unplug part of it.
 *
 * Build (scripts/check-c-physseg does this):
 *   cargo rustc -p hotkern-physmem-capi --profile capi --crate-type staticlib
 *   cc -std=c11 -Icrates/physmem-capi/include examples/c/physseg.c \
 *       target/capi/libhotkern_physmem_capi.a -o physseg
 */
#include <stdio.h>
#include <stdlib.h>

#include "uvm_physseg.h"

#define PAGE_SIZE 4096u

/* The kernel's page descriptor, padded to physmem's descriptor size. */
struct vm_page {
	paddr_t phys_addr;
	unsigned int flags;
	unsigned char rest[HOTKERN_VM_PAGE_SIZE - 12];
};
HOTKERN_VM_PAGE_FITS(struct vm_page);

/* The four hooks: memory (kmem), descriptor init, panic. */
void *hotkern_physseg_alloc(size_t size, size_t align)
{
	return aligned_alloc(align, (size + align - 1) / align * align);
}
void hotkern_physseg_free(void *ptr, size_t size, size_t align)
{
	(void)size, (void)align;
	free(ptr);
}
void hotkern_physseg_page_init(struct vm_page *pg, paddr_t phys_addr)
{
	pg->phys_addr = phys_addr;
}
void hotkern_physseg_panic(const char *message, size_t length)
{
	fprintf(stderr, "panic: %.*s\n", (int)length, message);
	abort();
}

struct e820_entry {
	uint64_t base, length;
	uint32_t type; /* 1: usable RAM */
};

static const struct e820_entry memory_map[] = {
	{ 0x00000000, 0x0009fc00, 1 }, /* low memory, up to the EBDA */
	{ 0x0009fc00, 0x00000400, 2 },
	{ 0x000f0000, 0x00010000, 2 }, /* BIOS */
	{ 0x00100000, 0x07ee0000, 1 }, /* 1 MiB .. 127 MiB */
	{ 0x07fe0000, 0x00020000, 2 }, /* ACPI */
};

int main(void)
{
	if (hotkern_physseg_vm_page_size() != sizeof(struct vm_page))
		return 1;
	uvm_physseg_init();
	for (size_t i = 0; i < sizeof memory_map / sizeof memory_map[0]; i++) {
		const struct e820_entry *e = &memory_map[i];
		/* Only whole pages inside usable RAM: round the start up and
		 * the end down. */
		paddr_t start = (e->base + PAGE_SIZE - 1) / PAGE_SIZE;
		paddr_t end = (e->base + e->length) / PAGE_SIZE;
		if (e->type != 1 || start >= end)
			continue;
		/* The kernel image occupies 1 MiB .. 3 MiB: not available. */
		paddr_t avail_start = start == 0x100 ? 0x300 : start;
		uvm_physseg_t upm = uvm_page_physload(start, end, avail_start,
		    end, 0);
		if (!uvm_physseg_valid_p(upm))
			return 2;
		printf("physload: frames [%#" PRIx64 ", %#" PRIx64 ")\n",
		    start, end);
	}

	/* Steal a page for the early page tables, before page init. */
	paddr_t table;
	if (!uvm_page_physunload(uvm_physseg_get_first(), 0, &table))
		return 3;
	printf("stolen page table at %#" PRIx64 "\n", table);

	if (!hotkern_physseg_init_pages())
		return 4;

	/* A DIMM arrives: 256 MiB at 4 GiB. */
	uvm_physseg_t dimm;
	if (!uvm_physseg_plug(0x100000, 0x10000, &dimm))
		return 5;

	psize_t offset;
	uvm_physseg_t found = uvm_physseg_find(0x100042, &offset);
	struct vm_page *pg = uvm_physseg_get_pg(found, offset);
	printf("frame 0x100042: segment [%#" PRIx64 ", %#" PRIx64
	    "), offset %#" PRIx64 ", descriptor for %#" PRIx64 "\n",
	    uvm_physseg_get_start(found), uvm_physseg_get_end(found), offset,
	    pg->phys_addr);
	if (found != dimm || pg->phys_addr != 0x100042ull * PAGE_SIZE)
		return 6;

	/* Half the DIMM goes away; its handle keeps the lower half. */
	if (!uvm_physseg_unplug(0x108000, 0x8000))
		return 7;
	if (uvm_physseg_find(0x108000, NULL) != UVM_PHYSSEG_TYPE_INVALID)
		return 8;

	for (uvm_physseg_t upm = uvm_physseg_get_first();
	     uvm_physseg_valid_p(upm); upm = uvm_physseg_get_next(upm))
		printf("segment [%#" PRIx64 ", %#" PRIx64 ")\n",
		    uvm_physseg_get_start(upm), uvm_physseg_get_end(upm));
	printf("highest frame %#" PRIx64 "\n", uvm_physseg_get_highest_frame());
	return 0;
}
