/*
 * uvm_physseg.h through hotkern-physmem, tested from C: the cases NetBSD's
 * ATF suites for uvm_physseg (tests/sys/uvm/t_uvm_physseg.c and
 * t_uvm_physseg_load.c) cover, and those the uvm_hotplug paper (Raju and
 * Mathew, 2017) cares about, written for hotkern without ATF.
 *
 * Each case runs in its own child process, as ATF runs each in its own
 * program: the library keeps one global segment set.
 */
#define _POSIX_C_SOURCE 200809L

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hooks.h"

static const char *current_case;

#define CHECK(condition)                                                      \
	do {                                                                  \
		if (!(condition)) {                                           \
			fprintf(stderr, "FAIL %s (%s:%d): %s\n",              \
			    current_case, __FILE__, __LINE__, #condition);    \
			exit(1);                                              \
		}                                                             \
	} while (0)

static size_t
segment_count(void)
{
	size_t count = 0;
	for (uvm_physseg_t upm = uvm_physseg_get_first();
	     uvm_physseg_valid_p(upm); upm = uvm_physseg_get_next(upm))
		count++;
	return count;
}

static void
check_bounds(uvm_physseg_t upm, paddr_t start, paddr_t end)
{
	CHECK(uvm_physseg_valid_p(upm));
	CHECK(uvm_physseg_get_start(upm) == start);
	CHECK(uvm_physseg_get_end(upm) == end);
}

static void
build_facts(void)
{
	CHECK(hotkern_physseg_vm_page_size() == HOTKERN_VM_PAGE_SIZE);
	CHECK(hotkern_physseg_vm_page_align() == HOTKERN_VM_PAGE_ALIGN);
}

static void
empty_set_answers_invalid(void)
{
	uvm_physseg_init();
	CHECK(uvm_physseg_get_first() == UVM_PHYSSEG_TYPE_INVALID_EMPTY);
	CHECK(uvm_physseg_get_last() == UVM_PHYSSEG_TYPE_INVALID_EMPTY);
	CHECK(!uvm_physseg_valid_p(UVM_PHYSSEG_TYPE_INVALID));
	CHECK(!uvm_physseg_valid_p(UVM_PHYSSEG_TYPE_INVALID_EMPTY));
	CHECK(!uvm_physseg_valid_p(UVM_PHYSSEG_TYPE_INVALID_OVERFLOW));
	CHECK(uvm_physseg_get_highest_frame() == (paddr_t)-1);
	psize_t offset = 77;
	CHECK(uvm_physseg_find(0, &offset) == UVM_PHYSSEG_TYPE_INVALID);
	CHECK(offset == 77);
	CHECK(uvm_physseg_get_start(UVM_PHYSSEG_TYPE_INVALID) == (paddr_t)-1);
	CHECK(uvm_physseg_get_free_list(UVM_PHYSSEG_TYPE_INVALID) == -1);
	CHECK(uvm_physseg_get_pg(UVM_PHYSSEG_TYPE_INVALID, 0) == NULL);
	CHECK(uvm_physseg_get_next(UVM_PHYSSEG_TYPE_INVALID) ==
	    UVM_PHYSSEG_TYPE_INVALID);
}

/* The paper's point against the static array: handles survive inserts in
 * any order, before and after page init. */
static void
handles_survive_out_of_order_physload(void)
{
	uvm_physseg_t high = uvm_page_physload(0x800, 0x900, 0x800, 0x900, 0);
	uvm_physseg_t low = uvm_page_physload(0x100, 0x200, 0x110, 0x200, 1);
	uvm_physseg_t middle = uvm_page_physload(0x400, 0x480, 0x400, 0x480, 2);
	for (int pass = 0; pass < 2; pass++) {
		check_bounds(low, 0x100, 0x200);
		check_bounds(middle, 0x400, 0x480);
		check_bounds(high, 0x800, 0x900);
		CHECK(uvm_physseg_get_avail_start(low) == 0x110);
		CHECK(uvm_physseg_get_free_list(middle) == 2);
		CHECK(uvm_physseg_get_first() == low);
		CHECK(uvm_physseg_get_next(low) == middle);
		CHECK(uvm_physseg_get_next(middle) == high);
		CHECK(uvm_physseg_get_next(high) ==
		    UVM_PHYSSEG_TYPE_INVALID_OVERFLOW);
		CHECK(uvm_physseg_get_last() == high);
		CHECK(uvm_physseg_get_prev(high) == middle);
		CHECK(uvm_physseg_get_prev(low) == UVM_PHYSSEG_TYPE_INVALID_EMPTY);
		CHECK(uvm_physseg_get_highest_frame() == 0x8ff);
		CHECK(hotkern_physseg_init_pages());
	}
	/* A plug below everything leaves the old handles alone. */
	uvm_physseg_t lowest;
	CHECK(uvm_physseg_plug(0x10, 0x10, &lowest));
	CHECK(uvm_physseg_get_first() == lowest);
	CHECK(uvm_physseg_get_prev(low) == lowest);
	check_bounds(low, 0x100, 0x200);
}

static void
physload_refuses_bad_input(void)
{
	uvm_physseg_t upm = uvm_page_physload(0x100, 0x200, 0x100, 0x200, 0);
	CHECK(uvm_physseg_valid_p(upm));
	CHECK(uvm_page_physload(0x300, 0x300, 0x300, 0x300, 0) ==
	    UVM_PHYSSEG_TYPE_INVALID);
	CHECK(uvm_page_physload(0x400, 0x300, 0x300, 0x400, 0) ==
	    UVM_PHYSSEG_TYPE_INVALID);
	CHECK(uvm_page_physload(0x300, 0x400, 0x2ff, 0x400, 0) ==
	    UVM_PHYSSEG_TYPE_INVALID);
	CHECK(uvm_page_physload(0x1ff, 0x280, 0x1ff, 0x280, 0) ==
	    UVM_PHYSSEG_TYPE_INVALID);
	CHECK(uvm_page_physload(0x300, 0x400, 0x300, 0x400, -1) ==
	    UVM_PHYSSEG_TYPE_INVALID);
	CHECK(uvm_page_physload(0, (paddr_t)1 << 41, 0, 1, 0) ==
	    UVM_PHYSSEG_TYPE_INVALID);
	CHECK(segment_count() == 1);
	for (paddr_t i = 1; i < VM_PHYSSEG_MAX; i++)
		CHECK(uvm_physseg_valid_p(uvm_page_physload(0x1000 * i,
		    0x1000 * i + 1, 0x1000 * i, 0x1000 * i + 1, 0)));
	CHECK(uvm_page_physload(0x100000, 0x100001, 0x100000, 0x100001, 0) ==
	    UVM_PHYSSEG_TYPE_INVALID);
	CHECK(segment_count() == VM_PHYSSEG_MAX);
	CHECK(hotkern_physseg_init_pages());
	/* NetBSD panics on physload after page init; here it is refused. */
	CHECK(uvm_physseg_unplug(0x100, 0x100));
	CHECK(uvm_page_physload(0x100, 0x200, 0x100, 0x200, 0) ==
	    UVM_PHYSSEG_TYPE_INVALID);
}

static void
find_gives_segment_and_offset(void)
{
	uvm_physseg_t a = uvm_page_physload(0x100, 0x200, 0x100, 0x200, 0);
	CHECK(hotkern_physseg_init_pages());
	uvm_physseg_t b;
	CHECK(uvm_physseg_plug(0x1000, 0x40, &b));
	psize_t offset = 0;
	CHECK(uvm_physseg_find(0x1ff, &offset) == a && offset == 0xff);
	CHECK(uvm_physseg_find(0x1000, &offset) == b && offset == 0);
	CHECK(uvm_physseg_find(0x103f, NULL) == b);
	offset = 5;
	CHECK(uvm_physseg_find(0x200, &offset) == UVM_PHYSSEG_TYPE_INVALID);
	CHECK(uvm_physseg_find(0x1040, &offset) == UVM_PHYSSEG_TYPE_INVALID);
	CHECK(uvm_physseg_find(0xff, &offset) == UVM_PHYSSEG_TYPE_INVALID);
	CHECK(offset == 5);
}

/* Before page init, find scans the boot segments. */
static void
find_works_before_page_init(void)
{
	uvm_physseg_t a = uvm_page_physload(0x100, 0x200, 0x100, 0x200, 0);
	psize_t offset = 0;
	CHECK(uvm_physseg_find(0x120, &offset) == a && offset == 0x20);
	CHECK(uvm_physseg_find(0x200, NULL) == UVM_PHYSSEG_TYPE_INVALID);
}

static void
plug_refuses_overlap_and_zero(void)
{
	CHECK(hotkern_physseg_init_pages());
	uvm_physseg_t upm = UVM_PHYSSEG_TYPE_INVALID;
	CHECK(uvm_physseg_plug(0x100, 0x100, &upm));
	uvm_physseg_t untouched = 42;
	CHECK(!uvm_physseg_plug(0x1ff, 1, &untouched));
	CHECK(!uvm_physseg_plug(0x80, 0x81, &untouched));
	CHECK(!uvm_physseg_plug(0x300, 0, &untouched));
	CHECK(!uvm_physseg_plug((paddr_t)1 << 40, 1, &untouched));
	CHECK(untouched == 42);
	CHECK(uvm_physseg_plug(0x200, 1, NULL));
	CHECK(segment_count() == 2);
}

static void
unplug_front_back_middle_whole(void)
{
	CHECK(hotkern_physseg_init_pages());
	uvm_physseg_t upm, other;
	CHECK(uvm_physseg_plug(0x100, 0x100, &upm));
	CHECK(uvm_physseg_plug(0x1000, 0x10, &other));
	/* front */
	CHECK(uvm_physseg_unplug(0x100, 0x10));
	check_bounds(upm, 0x110, 0x200);
	CHECK(uvm_physseg_get_avail_start(upm) == 0x110);
	/* back */
	CHECK(uvm_physseg_unplug(0x1f0, 0x10));
	check_bounds(upm, 0x110, 0x1f0);
	/* middle: the handle keeps the lower part */
	CHECK(uvm_physseg_unplug(0x150, 0x20));
	check_bounds(upm, 0x110, 0x150);
	uvm_physseg_t upper = uvm_physseg_find(0x170, NULL);
	CHECK(uvm_physseg_valid_p(upper) && upper != upm);
	check_bounds(upper, 0x170, 0x1f0);
	CHECK(uvm_physseg_find(0x160, NULL) == UVM_PHYSSEG_TYPE_INVALID);
	CHECK(uvm_physseg_get_next(upm) == upper);
	/* refused: straddling two segments, unknown frames, zero pages */
	CHECK(!uvm_physseg_unplug(0x140, 0x40));
	CHECK(!uvm_physseg_unplug(0x5000, 1));
	CHECK(!uvm_physseg_unplug(0x110, 0));
	check_bounds(upm, 0x110, 0x150);
	/* whole */
	CHECK(uvm_physseg_unplug(0x1000, 0x10));
	CHECK(!uvm_physseg_valid_p(other));
	CHECK(uvm_physseg_get_start(other) == (paddr_t)-1);
	CHECK(uvm_physseg_unplug(0x110, 0x40));
	/* the last segment stays (NetBSD panics) */
	CHECK(!uvm_physseg_unplug(0x170, 0x80));
	CHECK(segment_count() == 1 && uvm_physseg_get_first() == upper);
}

static void
physunload_takes_from_the_ends(void)
{
	uvm_physseg_t front = uvm_page_physload(0x100, 0x110, 0x100, 0x108, 1);
	uvm_physseg_t back = uvm_page_physload(0x200, 0x210, 0x204, 0x210, 1);
	uvm_physseg_t inner = uvm_page_physload(0x300, 0x310, 0x304, 0x308, 1);
	paddr_t paddr = 0;
	CHECK(uvm_page_physunload(front, 1, &paddr) && paddr == ctob(0x100));
	check_bounds(front, 0x101, 0x110);
	CHECK(uvm_page_physunload(back, 1, &paddr) && paddr == ctob(0x20f));
	check_bounds(back, 0x200, 0x20f);
	paddr = 9;
	CHECK(!uvm_page_physunload(inner, 1, &paddr));
	CHECK(!uvm_page_physunload(front, 0, &paddr)); /* other free list */
	CHECK(!uvm_page_physunload(front, 1, NULL));
	CHECK(paddr == 9);
	check_bounds(front, 0x101, 0x110);
	/* force takes the first available frame, splitting the segment */
	CHECK(uvm_page_physunload_force(inner, 7, &paddr) &&
	    paddr == ctob(0x304));
	check_bounds(inner, 0x300, 0x304);
	CHECK(uvm_physseg_get_start(uvm_physseg_get_next(inner)) == 0x305);
	CHECK(hotkern_physseg_init_pages());
	CHECK(!uvm_page_physunload(front, 1, &paddr));
	CHECK(!uvm_page_physunload_force(front, 1, &paddr));
}

static void
physunload_force_empties_a_segment(void)
{
	uvm_physseg_t keep = uvm_page_physload(0x10, 0x20, 0x10, 0x20, 0);
	uvm_physseg_t one = uvm_page_physload(0x100, 0x101, 0x100, 0x101, 0);
	paddr_t paddr;
	CHECK(uvm_page_physunload_force(one, 0, &paddr) && paddr == ctob(0x100));
	CHECK(!uvm_physseg_valid_p(one));
	CHECK(!uvm_page_physunload_force(one, 0, &paddr));
	CHECK(segment_count() == 1 && uvm_physseg_get_first() == keep);
}

static void
get_pg_gives_contiguous_initialised_descriptors(void)
{
	uvm_physseg_t boot = uvm_page_physload(0x100, 0x180, 0x100, 0x180, 0);
	CHECK(uvm_physseg_get_pg(boot, 0) == NULL); /* before page init */
	CHECK(hotkern_physseg_init_pages());
	uvm_physseg_t plugged;
	/* More than 64 frames: descriptors made on first lookup. */
	CHECK(uvm_physseg_plug(0x10000, 1000, &plugged));
	uvm_physseg_t segments[] = { boot, plugged };
	for (int s = 0; s < 2; s++) {
		uvm_physseg_t upm = segments[s];
		paddr_t start = uvm_physseg_get_start(upm);
		paddr_t pages = uvm_physseg_get_end(upm) - start;
		struct vm_page *base = uvm_physseg_get_pg(upm, 0);
		CHECK(base != NULL);
		CHECK((uintptr_t)base % HOTKERN_VM_PAGE_ALIGN == 0);
		for (paddr_t i = 0; i < pages; i++) {
			struct vm_page *pg = uvm_physseg_get_pg(upm, i);
			CHECK(pg == base + i);
			CHECK(pg->phys_addr == ctob(start + i));
			CHECK(pg->init_count == 1);
		}
		CHECK(uvm_physseg_get_pg(upm, pages) == NULL);
	}
	/* C's writes stay where they are across other changes. */
	uvm_physseg_get_pg(plugged, 500)->flags = 0xbeef;
	CHECK(uvm_physseg_plug(0x20000, 8, NULL));
	CHECK(uvm_physseg_unplug(0x10000, 10));
	CHECK(uvm_physseg_get_pg(plugged, 490)->flags == 0xbeef);
	CHECK(uvm_physseg_get_pg(plugged, 490)->phys_addr == ctob(0x101f4));
}

static void
boot_helpers_follow_uvm_page_init(void)
{
	uvm_page_physload(0x100, 0x180, 0x100, 0x180, 0);
	uvm_page_physload(0x400, 0x410, 0x400, 0x410, 0);
	static struct vm_page unused_array[0x90];
	uvm_physseg_t bank = uvm_physseg_get_first();
	uvm_physseg_seg_chomp_slab(bank, unused_array, 0x90);
	CHECK(uvm_physseg_seg_alloc_from_slab(bank, 0x7f) == NULL);
	for (; uvm_physseg_valid_p(bank); bank = uvm_physseg_get_next(bank)) {
		size_t n = uvm_physseg_get_end(bank) - uvm_physseg_get_start(bank);
		struct vm_page *pgs = uvm_physseg_seg_alloc_from_slab(bank, n);
		CHECK(pgs != NULL && pgs == uvm_physseg_get_pg(bank, 0));
		uvm_physseg_init_seg(bank, pgs);
		CHECK(pgs[n - 1].phys_addr == ctob(uvm_physseg_get_end(bank) - 1));
	}
	CHECK(unused_array[0].init_count == 0);
	CHECK(uvm_physseg_get_pg(uvm_physseg_get_last(), 0x0f) != NULL);
}

static void
setters_check_their_bounds(void)
{
	uvm_physseg_t upm = uvm_page_physload(0x100, 0x200, 0x100, 0x200, 0);
	CHECK(uvm_physseg_set_avail_start(upm, 0x120));
	CHECK(uvm_physseg_set_avail_end(upm, 0x1f0));
	CHECK(!uvm_physseg_set_avail_start(upm, 0xff));
	CHECK(!uvm_physseg_set_avail_start(upm, 0x1f1));
	CHECK(!uvm_physseg_set_avail_end(upm, 0x201));
	CHECK(!uvm_physseg_set_avail_end(upm, 0x11f));
	CHECK(!uvm_physseg_set_avail_start(UVM_PHYSSEG_TYPE_INVALID, 0x120));
	CHECK(uvm_physseg_get_avail_start(upm) == 0x120);
	CHECK(uvm_physseg_get_avail_end(upm) == 0x1f0);
	CHECK(uvm_physseg_set_start_hint(upm, 0x33));
	CHECK(!uvm_physseg_set_start_hint(UVM_PHYSSEG_TYPE_INVALID_EMPTY, 1));
	CHECK(hotkern_physseg_init_pages());
	CHECK(uvm_physseg_get_start_hint(upm) == 0x33);
	CHECK(uvm_physseg_set_avail_start(upm, 0x130));
	CHECK(uvm_physseg_get_avail_start(upm) == 0x130);
	CHECK(uvm_physseg_get_pmseg(upm) == NULL);
}

static void
made_up_and_stale_handles_are_refused(void)
{
	CHECK(hotkern_physseg_init_pages());
	uvm_physseg_t keep, gone;
	CHECK(uvm_physseg_plug(0x100, 0x10, &keep));
	CHECK(uvm_physseg_plug(0x200, 0x10, &gone));
	CHECK(uvm_physseg_unplug(0x200, 0x10));
	uvm_physseg_t bad[] = { gone, keep + 1, keep ^ 0x100000000ULL,
		0x12345678, 0xffffffffULL };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK(!uvm_physseg_valid_p(bad[i]));
		CHECK(uvm_physseg_get_end(bad[i]) == (paddr_t)-1);
		CHECK(uvm_physseg_get_pg(bad[i], 0) == NULL);
		CHECK(uvm_physseg_get_next(bad[i]) == UVM_PHYSSEG_TYPE_INVALID);
		CHECK(uvm_physseg_get_prev(bad[i]) == UVM_PHYSSEG_TYPE_INVALID);
		CHECK(!uvm_physseg_set_avail_end(bad[i], 0x105));
	}
	/* The slot comes back with a new generation: the old handle stays
	 * invalid. */
	uvm_physseg_t again;
	CHECK(uvm_physseg_plug(0x200, 0x10, &again));
	CHECK(again != gone && !uvm_physseg_valid_p(gone));
	check_bounds(keep, 0x100, 0x110);
}

static void
out_of_memory_changes_nothing(void)
{
	CHECK(hotkern_physseg_init_pages());
	uvm_physseg_t upm;
	CHECK(uvm_physseg_plug(0x100, 0x100, &upm));
	for (long budget = 0; budget < 64; budget++) {
		size_t before = segment_count();
		allocations_left = budget;
		bool plugged = uvm_physseg_plug(0x1000, 0x200, NULL);
		bool split = uvm_physseg_unplug(0x140, 0x10);
		allocations_left = -1;
		CHECK(segment_count() == before + plugged + split);
		if (!plugged)
			CHECK(uvm_physseg_find(0x1000, NULL) ==
			    UVM_PHYSSEG_TYPE_INVALID);
		if (!split)
			check_bounds(upm, 0x100, 0x200);
		if (plugged && split)
			return;
		if (plugged)
			CHECK(uvm_physseg_unplug(0x1000, 0x200));
		if (split)
			CHECK(uvm_physseg_plug(0x140, 0x10, NULL));
	}
	CHECK(!"64 allocations were never enough");
}

/* NetBSD's t_uvm_physseg_load: many segments, every frame looked up. */
static void
load_many_segments_and_look_up_every_frame(void)
{
	CHECK(hotkern_physseg_init_pages());
	enum { SEGMENTS = 2000, FRAMES = 7, GAP = 3 };
	for (paddr_t i = SEGMENTS; i-- > 0;)
		CHECK(uvm_physseg_plug(i * (FRAMES + GAP), FRAMES, NULL));
	CHECK(segment_count() == SEGMENTS);
	for (paddr_t pfn = 0; pfn < SEGMENTS * (FRAMES + GAP); pfn++) {
		psize_t offset;
		uvm_physseg_t upm = uvm_physseg_find(pfn, &offset);
		if (pfn % (FRAMES + GAP) >= FRAMES) {
			CHECK(upm == UVM_PHYSSEG_TYPE_INVALID);
			continue;
		}
		CHECK(offset == pfn % (FRAMES + GAP));
		CHECK(uvm_physseg_get_pg(upm, offset)->phys_addr == ctob(pfn));
	}
	CHECK(uvm_physseg_get_highest_frame() ==
	    (SEGMENTS - 1) * (FRAMES + GAP) + FRAMES - 1);
}

static const struct {
	const char *name;
	void (*run)(void);
} cases[] = {
#define CASE(name) { #name, name }
	CASE(build_facts),
	CASE(empty_set_answers_invalid),
	CASE(handles_survive_out_of_order_physload),
	CASE(physload_refuses_bad_input),
	CASE(find_gives_segment_and_offset),
	CASE(find_works_before_page_init),
	CASE(plug_refuses_overlap_and_zero),
	CASE(unplug_front_back_middle_whole),
	CASE(physunload_takes_from_the_ends),
	CASE(physunload_force_empties_a_segment),
	CASE(get_pg_gives_contiguous_initialised_descriptors),
	CASE(boot_helpers_follow_uvm_page_init),
	CASE(setters_check_their_bounds),
	CASE(made_up_and_stale_handles_are_refused),
	CASE(out_of_memory_changes_nothing),
	CASE(load_many_segments_and_look_up_every_frame),
#undef CASE
};

int
main(int argc, char **argv)
{
	int failed = 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	size_t count = sizeof cases / sizeof cases[0];
	for (size_t i = 0; i < count; i++) {
		if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)
			continue;
		fflush(NULL);
		pid_t child = fork();
		if (child == 0) {
			current_case = cases[i].name;
			cases[i].run();
			exit(0);
		}
		int status = 0;
		bool passed = child > 0 && waitpid(child, &status, 0) == child &&
		    WIFEXITED(status) && WEXITSTATUS(status) == 0;
		printf("%s %s\n", passed ? "ok  " : "FAIL", cases[i].name);
		failed += !passed;
	}
	printf("%zu cases, %d failed\n", count, failed);
	return failed != 0;
}
