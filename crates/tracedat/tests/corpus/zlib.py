#!/usr/bin/env python3
"""Writes a zlib-compressed version 7 copy of an uncompressed version 7
trace.dat: trace-cmd 3.1 here offers only zstd, and the reader's zlib path
deserves a real file too. Sections are laid out again in their order;
option lists stay uncompressed (as trace-cmd leaves them) with their
offsets rewritten; the CPU data is compressed two pages per chunk, so a
CPU's data spans several chunks.

usage: zlib.py IN.v7.dat OUT.v7zlib.dat
"""
import struct
import sys
import zlib

src = open(sys.argv[1], "rb").read()
assert src[:10] == b"\x17\x08\x44tracing" and src[10:12] == b"7\0"
assert src[12] == 0, "little-endian files only"
page = struct.unpack_from("<I", src, 14)[0]
at = 18
assert src[at:at + 6] == b"none\0\0"
first_opts = struct.unpack_from("<Q", src, at + 6)[0]

OPT_DONE, OPT_BUFFER = 0, 3
SECTION_OPTS = (16, 17, 18, 19, 20, 21)


def section(off):
    sid, flags, name, size = struct.unpack_from("<HHIQ", src, off)
    return sid, flags, name, src[off + 16:off + 16 + size]


def options(body):
    """(id, data offset within body, data) per option."""
    out, i = [], 0
    while i + 6 <= len(body):
        oid, size = struct.unpack_from("<HI", body, i)
        out.append((oid, i + 6, body[i + 6:i + 6 + size]))
        i += 6 + size
        if oid == OPT_DONE:
            break
    return out


# Every section, found through the option lists.
sections, lists, buffers = {}, [], []
nxt = first_opts
while nxt:
    lists.append(nxt)
    sid, _, _, body = section(nxt)
    sections[nxt] = sid
    nxt = 0
    for oid, _, data in options(body):
        if oid in SECTION_OPTS:
            sections[struct.unpack_from("<Q", data)[0]] = oid
        elif oid == OPT_BUFFER:
            off = struct.unpack_from("<Q", data)[0]
            sections[off] = 3
            buffers.append(off)
        elif oid == OPT_DONE:
            nxt = struct.unpack_from("<Q", data)[0]
# The strings section follows the last list.
last = max(sections)
strings_off = last + 16 + struct.unpack_from("<Q", src, last + 12)[0]
if strings_off < len(src):
    sections[strings_off] = 15


def zblock(data):
    c = zlib.compress(data)
    return struct.pack("<II", len(c), len(data)) + c


def cpu_table(data):
    """The BUFFER option's per-CPU (id, offset, size) list and where it starts."""
    i = 8
    name_end = data.index(b"\0", i)
    i = name_end + 1
    clock_end = data.index(b"\0", i)
    i = clock_end + 1 + 4
    count = struct.unpack_from("<I", data, i)[0]
    i += 4
    return i, [struct.unpack_from("<IQQ", data, i + 20 * k) for k in range(count)]


# Lay out: header, then sections in their old order.
header = src[:18] + b"zlib\0" + b"1.2.13\0"
pos = len(header) + 8
new_off, blobs, cpu_new = {}, [], {}
for off in sorted(sections):
    sid, flags, name, body = section(off)
    new_off[off] = pos
    if off in lists:
        blob = struct.pack("<HHIQ", sid, 0, name, len(body)) + body
    elif sid == 3:
        # The buffer's option names its CPU data; compress each CPU's.
        opt = next(d for lo in lists for oid, _, d in options(section(lo)[3])
                   if oid == OPT_BUFFER and struct.unpack_from("<Q", d)[0] == off)
        _, cpus = cpu_table(opt)
        data = b""
        base = pos + 16
        for cpu, coff, csize in cpus:
            raw = src[coff:coff + csize]
            chunks = [raw[i:i + 2 * page] for i in range(0, len(raw), 2 * page)]
            part = struct.pack("<I", len(chunks)) + b"".join(zblock(c) for c in chunks)
            cpu_new[(off, cpu)] = (base + len(data), len(part))
            data += part
        blob = struct.pack("<HHIQ", sid, 1, name, len(data)) + data
    else:
        data = zblock(body)
        blob = struct.pack("<HHIQ", sid, 1, name, len(data)) + data
    blobs.append((off, blob))
    pos += len(blob)

# Patch the option lists' offsets.
out = bytearray(header + struct.pack("<Q", new_off[first_opts]))
for off, blob in blobs:
    blob = bytearray(blob)
    if off in lists:
        body_start = 16
        for oid, doff, data in options(bytes(blob[16:])):
            at = body_start + doff
            if oid in SECTION_OPTS or (oid == OPT_DONE and struct.unpack_from("<Q", data)[0]):
                struct.pack_into("<Q", blob, at, new_off[struct.unpack_from("<Q", data)[0]])
            elif oid == OPT_BUFFER:
                sec = struct.unpack_from("<Q", data)[0]
                struct.pack_into("<Q", blob, at, new_off[sec])
                tstart, cpus = cpu_table(data)
                for k, (cpu, _, _) in enumerate(cpus):
                    noff, nsize = cpu_new[(sec, cpu)]
                    struct.pack_into("<IQQ", blob, at + tstart + 20 * k, cpu, noff, nsize)
    out += blob
open(sys.argv[2], "wb").write(bytes(out))
