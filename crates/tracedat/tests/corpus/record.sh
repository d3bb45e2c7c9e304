#!/bin/sh
# Records one corpus trace from the running Linux kernel.
#
# `trace-cmd record` must write ftrace_enabled, which some sandboxes refuse,
# so events are enabled through tracefs files and the buffers saved with
# `trace-cmd extract`: version 7, zstd-compressed, as trace-cmd 3.1 writes by
# default. The file is converted to version 6 and to uncompressed version 7,
# and the text `trace-cmd report -N` prints (the same for all three) is saved
# as NAME.txt so the tests run where trace-cmd is not installed.
#
# A whole kernel's event formats (2 MB) and kallsyms (5 MB) would not fit the
# corpus, so extract runs in a private mount namespace that sees only the
# formats of the events that fired and only the kallsyms lines the trace's
# text names (each with the symbol after it, so lookups end where they did).
#
# With CLOCK=NAME, the trace clock is NAME (x86-tsc, counter: trace-cmd
# prints those clocks' values raw) for the recording.
#
# With INSTANCE=NAME in the environment, the same events are also recorded
# in a tracefs instance of that name, and both buffers are saved (`extract
# -a -t`): trace-cmd then prints the instance's records prefixed `NAME:`.
#
# usage (as root): sh record.sh NAME KB "system[:event] ..." [workload...]
set -eu
name=$1 kb=$2 events=$3
shift 3
t=/sys/kernel/tracing
here=$(pwd)
[ -e $t/events ] || mount -t tracefs nodev $t
dirs=$t
extract_flags=
if [ -n "${INSTANCE:-}" ]; then
    mkdir -p "$t/instances/$INSTANCE"
    dirs="$t $t/instances/$INSTANCE"
    extract_flags="-a -t"
fi
for d in $dirs; do
    echo 0 > $d/tracing_on
    echo 0 > $d/events/enable
    echo "$kb" > $d/buffer_size_kb
    echo > $d/trace
    for e in $events; do
        case $e in
        all) echo 1 > $d/events/enable ;;
        *:*) echo 1 > "$d/events/${e%%:*}/${e#*:}/enable" ;;
        *) echo 1 > "$d/events/$e/enable" ;;
        esac
    done
done
[ -z "${CLOCK:-}" ] || echo "$CLOCK" > $t/trace_clock
for d in $dirs; do echo 1 > $d/tracing_on; done
if [ $# -gt 0 ]; then "$@" > /dev/null 2>&1 || true; else sleep 0.2; fi
for d in $dirs; do
    echo 0 > $d/tracing_on
    echo 0 > $d/events/enable
done

work=$(mktemp -d)
# Reading `trace` leaves the buffer as it is; extract reads it afterwards.
for d in $dirs; do grep -v '^#' $d/trace; done > "$work/text"
mkdir "$work/events"
cp $t/events/header_page $t/events/header_event "$work/events/"
cp -r $t/events/ftrace "$work/events/ftrace"
# The kernel prints syscall events as `sys_NAME(args)` and `sys_NAME -> ret`.
awk '{ for (i = 1; i < NF; i++) if ($i ~ /^[0-9]+(\.[0-9]+)?:$/) {
        e = $(i+1)
        if (e ~ /^sys_[a-z0-9_]+\(/) { sub(/\(.*/, "", e); sub(/^sys_/, "sys_enter_", e) }
        else if ($(i+2) == "->") sub(/^sys_/, "sys_exit_", e)
        else sub(/:$/, "", e)
        print e; break } }' "$work/text" | sort -u > "$work/fired"
while read -r ev; do
    for d in $t/events/*/"$ev"; do
        [ -f "$d/format" ] || continue
        sys=$(basename "$(dirname "$d")")
        [ "$sys" = ftrace ] && continue
        mkdir -p "$work/events/$sys/$ev"
        cp "$d/format" "$d/id" "$work/events/$sys/$ev/" 2>/dev/null || cp "$d/format" "$work/events/$sys/$ev/"
    done
done < "$work/fired"
tr -c 'A-Za-z0-9_.' '\n' < "$work/text" | sort -u > "$work/words"
sort /proc/kallsyms | awk -v words="$work/words" '
    BEGIN { while ((getline w < words) > 0) want[w] = 1 }
    { if (keep_next) { print; keep_next = 0 } if ($3 in want) { print; keep_next = 1 } }' |
    sort -u > "$work/kallsyms"
unshare -m sh -c "
    mount --bind '$work/events' $t/events &&
    mount --bind '$work/kallsyms' /proc/kallsyms &&
    cd '$work' && trace-cmd extract $extract_flags -o out.dat > /dev/null"
cp "$work/out.dat" "$here/$name.v7zstd.dat"
rm -rf "$work"
[ -z "${CLOCK:-}" ] || echo local > $t/trace_clock
echo 1 > $t/tracing_on
# extract -a removes the instances it saved.
[ -z "${INSTANCE:-}" ] || rmdir "$t/instances/$INSTANCE" 2> /dev/null || true
cd "$here"
trace-cmd convert -i "$name.v7zstd.dat" --file-version 6 --compression none -o "$name.v6.dat" > /dev/null
trace-cmd convert -i "$name.v7zstd.dat" --file-version 7 --compression none -o "$name.v7.dat" > /dev/null
trace-cmd report -N -i "$name.v7zstd.dat" > "$name.txt"
for f in "$name".v6.dat "$name".v7.dat; do
    trace-cmd report -N -i "$f" | cmp -s - "$name.txt" || { echo "$f: report differs" >&2; exit 1; }
done
#
# sched.v7zlib.dat is sched.v7.dat recompressed by zlib.py: this trace-cmd
# offers zstd only.
#
# hotkern.v6.dat is not from Linux: `hotkern trace demo --threads 2
# --requests 4` wrote it (function_graph and trace_printk records), and
# hotkern.txt is what `trace-cmd report -N` prints for it.
#
# damaged.txt is what `trace-cmd report -N` printed for marker.v6.dat with
# its CPU 0 page's second event header overwritten (type 0, 65535 bytes);
# tests/bad_input.rs makes the same file and compares.
