#!/usr/bin/env python3
"""Writes a copy of a version 6 trace.dat in which one event format has a
field line libtraceevent cannot read: TEXT is cut out of EVENT's format
(badfield.v6.dat is hotkern.v6.dat with `offset:16;\\t` cut from
request_done's `checksum` line). The format's u64 length is fixed, and the
bytes cut are added to the zero padding before the first CPU's data, so
the offsets in the flyrecord table stay right and the file stays valid.
trace-cmd keeps the event and prints its records as `[FAILED TO PARSE]`
with the fields read before the bad line; badfield.txt is what
`trace-cmd report -N` printed.

usage: badfield.py IN.v6.dat OUT.v6.dat EVENT TEXT
"""
import sys

src, dst, event = sys.argv[1], sys.argv[2], sys.argv[3].encode()
cut = sys.argv[4].encode().decode("unicode_escape").encode()
data = bytearray(open(src, "rb").read())
start = data.find(b"name: " + event + b"\n")
assert start > 8, "no such event"
size = int.from_bytes(data[start - 8:start], "little")
text = bytes(data[start:start + size])
assert text.count(cut) == 1, "TEXT must occur once in the format"
new = text.replace(cut, b"")
removed = len(text) - len(new)
data[start - 8:start] = len(new).to_bytes(8, "little")
data[start:start + size] = new
# Version 6: "flyrecord\0", then each CPU's (offset, size); the first
# offset is where the page-aligned data starts, after zero padding.
table = data.find(b"flyrecord\0") + 10
first = int.from_bytes(data[table:table + 8], "little") - removed
assert not any(data[first - 64:first]), "no padding before the CPU data"
data[first:first] = bytes(removed)
open(dst, "wb").write(data)
