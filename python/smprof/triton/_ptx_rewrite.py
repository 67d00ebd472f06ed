"""Makes a Triton module with smprof markers look like a CUDA C++ module
that includes smprof's header: the injector then finds it, lights and darkens
it, and reads its names exactly as it does for CUDA C++ (no injector change).

Runs on the PTX text Triton produces (installed as a wrapper of the "ptx"
compile stage by _hook.py), before ptxas. For a module whose PTX holds
markers (_marker_ptx.py) it:

  * declares the two module globals the injector looks up by name:
    g_arena<2> (a 64-byte wire::ArenaRef in .const, zero until the injector
    publishes the arena) and g_name_base<2> (here the module's name table:
    byte 0 unused, then every marker name NUL-terminated, no cap);
  * replaces each tag token by the event's tag (the name's offset in that
    table, the kind and flags: wire::CompactEvent);
  * puts the prologue (the warp's recording state in function-scope
    registers; the first chunk's claim when the kernel's warps are likely
    to record: _claims_first_chunk_early) at the top of every kernel with
    markers;
  * numbers every marker occurrence, so that the labels of copies Triton
    made of one marker (unrolled, pipelined loops) stay distinct;
  * on targets with clusters (sm_90 on), has the chunk header carry the
    cluster's shape, so that a program of num_ctas > 1 CTAs is named by its
    program id and CTA (_marker_ptx.cluster_shape);
  * splits the markers into runs in straight-line code and gives each run's
    first marker the room check for the whole run and the cursor's advance
    past it (the others lose theirs, and their cold paths), places every
    marker's slots at a fixed distance back from the advanced cursor, joins
    stores that share a 16-byte unit (_join_stores), and moves the cold
    paths behind the kernel's last instruction.

A module without markers comes back unchanged. Markers in a non-inlined
function (a separate PTX .func) are refused: they could not see the kernel's
registers. Pure text processing: tested on the CPU (python/tests).
"""

from __future__ import annotations

import re

from smprof.triton import _marker_ptx as mp


class RewriteError(Exception):
    """The module's markers cannot be laid out (the message says why)."""


_NAME_RE = re.compile(re.escape(mp.NAME_COMMENT) + r" ([0-9a-f]{8}) ([0-9a-f]*)")
_TAG_RE = re.compile(re.escape(mp.PREFIX) + r"g([0-9a-f]{8})x([0-9a-f]{8})\b")
_LABEL_RE = re.compile(r"^\s*([$%\w.]+):")
_CONTROL_RE = re.compile(r"^\s*(?:@!?%?[\w$]+\s+)?(?:bra|brx|call|ret|exit|trap)\b")
_FUNC_RE = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+|\.extern\s+)*\.(entry|func)\b[^(]*?([A-Za-z_$][\w$]*)\s*\(")


def has_markers(ptx: str) -> bool:
    return mp.MARKER_TAG in ptx


def _names(ptx: str) -> dict[int, bytes]:
    """hash -> name bytes, from the markers' name comments (checked)."""
    names: dict[int, bytes] = {}
    for m in _NAME_RE.finditer(ptx):
        h = int(m.group(1), 16)
        data = bytes.fromhex(m.group(2))
        if mp.fnv1a32(data) != h:
            raise RewriteError(f"marker name {data!r}: its hash {h:08x} does not match (corrupted PTX?)")
        if b"\0" in data:
            raise RewriteError(f"marker name {data!r} contains a NUL byte")
        other = names.setdefault(h, data)
        if other != data:
            raise RewriteError(
                f"marker names {other.decode('utf-8', 'replace')!r} and {data.decode('utf-8', 'replace')!r} "
                f"have the same 32-bit hash {h:08x}: rename one of them")
    return names


def name_table(names: dict[int, bytes]) -> tuple[bytes, dict[int, int]]:
    """The table's bytes and each name's offset (names in order of first use)."""
    table = bytearray(b"\0")
    offsets = {}
    for h, data in names.items():
        offsets[h] = len(table)
        table += data + b"\0"
    return bytes(table), offsets


def _depth_change(line: str) -> int:
    code = line.split("//", 1)[0]
    return code.count("{") - code.count("}")


def _functions(lines: list[str]) -> list[tuple[str, str, int, int]]:
    """(kind, name, index of the body's '{' line, index of its '}' line)."""
    found = []
    i = 0
    while i < len(lines):
        m = _FUNC_RE.match(lines[i])
        if not m:
            i += 1
            continue
        kind, name = m.group(1), m.group(2)
        j = i
        while j < len(lines) and lines[j].split("//", 1)[0].strip() != "{":
            if lines[j].rstrip().endswith(";"):  # a declaration (prototype), no body
                break
            j += 1
        if j >= len(lines) or lines[j].split("//", 1)[0].strip() != "{":
            i = j + 1
            continue
        depth = 0
        k = j
        while k < len(lines):
            depth += _depth_change(lines[k])
            if depth == 0:
                break
            k += 1
        if depth != 0:
            raise RewriteError(f"function {name}: its body does not end (unbalanced braces)")
        found.append((kind, name, j, k))
        i = k + 1
    return found


def _split(body: list[str]) -> list[tuple[bool, list[str]]]:
    """The body as (is a marker, lines) pieces, in order."""
    pieces: list[tuple[bool, list[str]]] = []
    marker: list[str] | None = None
    for line in body:
        text = line.strip()
        if text.startswith(mp.MARKER_TAG):
            if marker is not None:
                raise RewriteError("a marker does not end before the next begins (truncated asm?)")
            marker = []
        if marker is not None:
            marker.append(line)
            if text == mp.MARKER_END:
                pieces.append((True, marker))
                marker = None
        elif pieces and not pieces[-1][0]:
            pieces[-1][1].append(line)
        else:
            pieces.append((False, [line]))
    if marker is not None:
        raise RewriteError("a marker does not end (truncated asm?)")
    return pieces


def _slots(marker: list[str]) -> int:
    for line in marker:
        if line.strip().startswith(mp.SLOTS_COMMENT):
            return int(line.split()[-1])
    raise RewriteError("a marker has no slot count (PTX of another smprof version?)")


def _guarded(marker: list[str]) -> bool:
    return any(line.strip() == mp.GUARDED_COMMENT for line in marker)


_BRANCH_RE = re.compile(r"^\s*(?:@!?%?[\w$]+\s+)?bra(?:\.uni)?\s+([$%\w.]+)\s*;")


def _claims_first_chunk_early(pieces: list[tuple[bool, list[str]]]) -> bool:
    """Whether the kernel's warps claim their first chunk in the prologue
    (_marker_ptx.prologue): when it has a marker without "who records"
    options that is inside a loop, or that no forward branch jumps over. A
    warp that claims early and then reaches no marker wastes a chunk, so a
    kernel whose every such marker sits only behind a forward branch (`if
    pid == 0:`) claims at its first event, as before. Loops count as reached
    (LLVM guards a loop that may run zero times with a forward branch around
    it: a marker in a K loop is behind one too). Positions only: the
    kernel's own labels and branches, in text order."""
    labels: dict[str, int] = {}
    branches: list[tuple[int, str]] = []
    markers: list[int] = []
    at = 0
    for is_marker, lines in pieces:
        if is_marker:
            if not _guarded(lines):
                markers.append(at)
            at += 1
            continue
        for line in lines:
            m = _LABEL_RE.match(line)
            if m:
                labels[m.group(1)] = at
            m = _BRANCH_RE.match(line)
            if m:
                branches.append((at, m.group(1)))
            at += 1
    spans = [(b, labels[t]) for b, t in branches if t in labels]
    for m in markers:
        in_loop = any(t < m < b for b, t in spans)
        jumped_over = any(b < m < t for b, t in spans)
        if in_loop or not jumped_over:
            return True
    return False


def _runs(pieces: list[tuple[bool, list[str]]], slots: dict[int, int]) -> list[list[int]]:
    """Runs of markers (indices into `pieces`; `slots` holds each marker's
    slot count) in straight-line code: no
    label (a place other code can jump to) and no control transfer between
    them, so every marker of a run executes once each time its first does.
    A run fills at most MAX_RUN_SLOTS slots (room in the smallest chunk). A
    marker with its own "who records" test (a guard option) is a run of its
    own: a warp that skips it must not have its slots counted in a run."""
    runs: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for i, (is_marker, lines) in enumerate(pieces):
        if is_marker and _guarded(lines):
            if current:
                runs.append(current)
            runs.append([i])
            current, filled = [], 0
        elif is_marker:
            n = slots[i]
            if current and filled + n > mp.MAX_RUN_SLOTS:
                runs.append(current)
                current, filled = [], 0
            current.append(i)
            filled += n
        elif any(_LABEL_RE.match(line) or _CONTROL_RE.match(line) for line in lines):
            if current:
                runs.append(current)
            current, filled = [], 0
    if current:
        runs.append(current)
    return runs


def _join_stores(run_slots: list[int]) -> list[str]:
    """How each marker of a run stores (_marker_ptx.EVENT_STORE): "hold"
    (its event waits in registers), "pair" (stores the held event and its
    own, 16 bytes), "with value" (its event and value, 16 bytes) or "alone"
    (8 bytes, and its value 8 more). Units at even slots of the run are
    16-byte aligned (_marker_ptx.ALIGN_RUN)."""
    how = ["alone"] * len(run_slots)
    at = 0
    for k, n in enumerate(run_slots):
        if at % 2 == 0 and how[k] == "alone":
            if n == 2:
                how[k] = "with value"
            elif k + 1 < len(run_slots) and run_slots[k + 1] == 1:
                how[k], how[k + 1] = "hold", "pair"
        at += n
    return how


class _Run:
    """A run's layout: its slots, how each marker stores, whether it is
    aligned to 16 bytes, and the bytes the cursor moves past."""

    def __init__(self, run_slots: list[int]):
        self.slots = run_slots
        self.how = _join_stores(run_slots)
        self.aligned = any(h in ("pair", "with value") for h in self.how)
        raw = sum(run_slots) * mp.EVENT_BYTES
        self.bytes = -(-raw // mp.UNIT_BYTES) * mp.UNIT_BYTES if self.aligned else raw

    def fills(self) -> dict[str, str]:
        # The check asks for the run, the slot an aligned run may skip to
        # start aligned, and the chunk's last slot, which stays empty
        # (_marker_ptx._store).
        skip = mp.EVENT_BYTES if self.aligned else 0
        return {"SMPROF2_ROOM": str(self.bytes + skip + mp.EVENT_BYTES),
                "SMPROF2_RUN_BYTES": str(self.bytes + (mp.UNIT_BYTES - 1 if self.aligned else 0)),
                "SMPROF2_EVENTS": str(len(self.slots))}


def _lay_out(marker: list[str], marker_id: int, run: _Run, first: bool, back: int,
             how: str) -> tuple[list[str], list[str]]:
    """One marker's lines for the body and for the cold paths. A run's
    `first` marker checks the room for the whole run, advances the cursor
    past it and has a cold path; the others none of these. `back` is the
    bytes from the marker's first slot to the run's end, `how` how it
    stores (_join_stores)."""
    fills = {"SMPROF2_ID": str(marker_id), "SMPROF2_VALUE_BACK": str(back - mp.EVENT_BYTES),
             "SMPROF2_PAIR_BACK": str(back + mp.EVENT_BYTES), "SMPROF2_BACK": str(back)}
    if first:
        fills.update(run.fills())
    body: list[str] = []
    cold: list[str] = []
    where: list[str] | None = body
    skip = False  # in a later marker's advance lines
    for line in marker:
        text = line.strip()
        if text in (mp.CHECK_BEGIN, mp.COLD_BEGIN):
            where = None if not first else cold if text == mp.COLD_BEGIN else body
        skip = skip or (not first and text == mp.ADVANCE_BEGIN)
        lines = [line]
        if text == mp.EVENT_STORE:
            lines = {"hold": mp.hold(), "pair": [mp.store_pair()], "with value": []}.get(how, lines)
        elif text.startswith(mp.VALUE_STORE) and how == "with value":
            lines = [mp.store_with_value(text)]
        elif text == mp.ALIGN_RUN and not run.aligned:
            lines = []
        for line in lines:
            for placeholder, value in fills.items():
                line = line.replace(placeholder, value)
            if where is not None and not skip:
                where.append(line)
        if text in (mp.CHECK_END, mp.COLD_END):
            where = body
        skip = skip and text != mp.ADVANCE_END
    return body, cold


def _rewrite_body(pieces: list[tuple[bool, list[str]]], next_id: int) -> tuple[list[str], list[str], int]:
    """Numbers the markers of one function body (split by _split), gives the
    first marker of every run of markers in straight-line code the room
    check for the whole run (the others store without a test) and takes the
    cold paths out. Returns (body, cold lines for the function's end, next
    free id)."""
    slots = {i: _slots(lines) for i, (is_marker, lines) in enumerate(pieces) if is_marker}
    layout: dict[int, tuple[_Run, bool, int, str]] = {}  # marker piece -> (run, first, back, how)
    for indices in _runs(pieces, slots):
        run = _Run([slots[i] for i in indices])
        left = run.bytes
        for k, (i, how) in enumerate(zip(indices, run.how)):
            layout[i] = (run, k == 0, left, how)
            left -= slots[i] * mp.EVENT_BYTES
    out: list[str] = []
    cold: list[str] = []
    for i, (is_marker, lines) in enumerate(pieces):
        if not is_marker:
            out += lines
            continue
        b, c = _lay_out(lines, next_id, *layout[i])
        next_id += 1
        out += b
        cold += c
    return out, cold, next_id


def rewrite(ptx: str) -> str:
    """The module with smprof's globals, prologues and names laid out."""
    if not has_markers(ptx):
        return ptx
    names = _names(ptx)
    table, offsets = name_table(names)

    if len(table) > mp.NAME_LIMIT:
        raise RewriteError(f"the module's marker names take {len(table)} bytes; at most {mp.NAME_LIMIT} fit "
                           "an event's name offset: use fewer or shorter names")

    def tag(m: re.Match) -> str:
        h = int(m.group(1), 16)
        if h not in offsets:
            raise RewriteError(f"marker tag token {m.group(0)} has no name declaration")
        return str(offsets[h] << mp.NAME_SHIFT | int(m.group(2), 16))

    lines = _TAG_RE.sub(tag, ptx).split("\n")
    functions = _functions(lines)
    out: list[str] = []
    at = 0
    next_id = 0
    for kind, name, open_i, close_i in functions:
        body = lines[open_i + 1:close_i]
        if not any(mp.MARKER_TAG in b for b in body):
            continue
        if kind != "entry":
            raise RewriteError(
                f"function {name} has smprof markers but is not inlined into its kernel: "
                "remove noinline=True from its @triton.jit (markers need the kernel's registers)")
        pieces = _split(body)
        body, cold, next_id = _rewrite_body(pieces, next_id)
        out += lines[at:open_i + 1]
        out += mp.prologue(_claims_first_chunk_early(pieces))
        out += body
        out.append("// smprof2: the markers' cold paths")
        out += cold
        out.append(lines[close_i])
        at = close_i + 1
    out += lines[at:]
    if next_id == 0:
        raise RewriteError("smprof markers found outside any kernel body")
    text = "\n".join(out).replace(mp.CLUSTER_SHAPE, "\n".join(mp.cluster_shape()) if _has_clusters(ptx) else "")
    return _add_globals(text, table)


def _has_clusters(ptx: str) -> bool:
    """Whether the module's target has thread block clusters (sm_90 on)."""
    m = re.search(r"^\s*\.target\s+sm_(\d+)", ptx, re.MULTILINE)
    if m is None:
        raise RewriteError("the PTX has no .target sm_<N> line (needed to know whether it has clusters)")
    return int(m.group(1)) >= 90


def _add_globals(ptx: str, table: bytes) -> str:
    decl = [
        "",
        "// smprof2: what the injector looks up (include/smprof/wire.h, detail/record.cuh)",
        f".visible .const .align 8 .b8 {mp.ARENA_SYMBOL}[64];",
        f".visible .global .align 8 .b8 {mp.NAME_BASE_SYMBOL}[{len(table)}] = {{{', '.join(str(b) for b in table)}}};",
        "",
    ]
    m = re.search(r"^\s*\.address_size\s+\d+\s*$", ptx, re.MULTILINE)
    if m is None:
        raise RewriteError("the PTX has no .address_size line to put smprof's globals after")
    return ptx[:m.end()] + "\n" + "\n".join(decl) + ptx[m.end():]
