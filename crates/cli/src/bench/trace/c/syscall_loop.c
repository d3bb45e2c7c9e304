/*
 * Linux's side of `hotkern bench trace --platform qemu`: CALLS getppid(2)
 * system calls in a loop, timed by CLOCK_MONOTONIC around the whole loop,
 * printed on the console as one line the host reads:
 *
 *     hotkern-linux: loop LABEL CALLS NANOSECONDS
 *
 * Built with `cc -static -O2` on the host, run from the guest's initramfs
 * (which has no C library). syscall(2) rather than getppid(3), so that no
 * C library caches the answer and every call enters the kernel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: syscall-loop LABEL CALLS\n");
		return 2;
	}
	long calls = strtol(argv[2], NULL, 10);
	if (calls <= 0) {
		fprintf(stderr, "syscall-loop: CALLS must be above 0, not %s\n", argv[2]);
		return 2;
	}
	struct timespec start, end;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (long i = 0; i < calls; i++)
		syscall(SYS_getppid);
	clock_gettime(CLOCK_MONOTONIC, &end);
	long long nanos = (long long)(end.tv_sec - start.tv_sec) * 1000000000LL +
			  (end.tv_nsec - start.tv_nsec);
	printf("hotkern-linux: loop %s %ld %lld\n", argv[1], calls, nanos);
	return 0;
}
