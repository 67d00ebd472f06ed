"""Runs lane 0 of one warp through a kernel's PTX, for the CPU tests of the
Triton markers: the rewritten module's prologue, markers and cold paths
execute against a modelled arena, so the tests check what the device would
store, not only the text.

A model, not an emulator. It knows the instructions the markers, the
rewriter and the tests' own kernels use, and refuses any other (so a marker
that starts using one fails its tests instead of passing unchecked). One
lane stands for its warp: Triton's scalars are uniform and only lane 0
stores, so `redux.sync.max` is the lane's own value (lane 0's claim is the
warp's maximum: the other lanes contribute 0). Memory is the arena's bytes
and nothing else: any global access outside them raises, which is how a
store through a cursor in a state (no chunk, arena full) would show.
%clock and %clock64 count executed instructions.
"""

from __future__ import annotations

import re
import struct

M32 = (1 << 32) - 1
M64 = (1 << 64) - 1


class PtxError(Exception):
    """The PTX uses something this model does not know, or went wrong."""


class Arena:
    """Device memory: `size` bytes at address `base`."""

    def __init__(self, base: int, size: int):
        self.base = base
        self.bytes = bytearray(size)

    def _at(self, addr: int, n: int) -> int:
        off = addr - self.base
        if off < 0 or off + n > len(self.bytes):
            raise PtxError(f"global access of {n} bytes at {addr:#x}, outside the arena")
        if addr % n:
            raise PtxError(f"misaligned {n}-byte access at {addr:#x}")
        return off

    def read(self, addr: int, n: int) -> int:
        off = self._at(addr, n)
        return int.from_bytes(self.bytes[off:off + n], "little")

    def write(self, addr: int, n: int, value: int) -> None:
        off = self._at(addr, n)
        self.bytes[off:off + n] = (value & ((1 << (8 * n)) - 1)).to_bytes(n, "little")


_MEM_RE = re.compile(r"^\[\s*([^\]+\s]+)\s*(?:\+\s*(-?\w+))?\s*\]$")
_LABEL_RE = re.compile(r"^([$\w.]+):$")


def _int(text: str) -> int:
    return int(text, 0)


class Lane:
    """Lane 0 of warp `warp` of block `block`, running kernel `kernel`.

    `const` maps a .const symbol to its bytes, `symbols` any other symbol
    to its address, `params` a parameter name to its value, `cluster` the
    launch's cluster shape (%cluster_nctaid; (1, 1, 1) without clusters). `watch(lane)`
    is called before every instruction (a test may change `const` then).
    """

    def __init__(self, ptx: str, kernel: str, arena: Arena, const: dict[str, bytearray],
                 symbols: dict[str, int], params: dict[str, int], warp: int = 0, block=(0, 0, 0),
                 sm: int = 3, grid: int = 7, watch=None, cluster=(1, 1, 1)):
        self.code, self.labels = self._parse(ptx, kernel)
        self.arena = arena
        self.const = const
        self.symbols = symbols
        self.params = params
        self.regs: dict[str, int] = {}
        self.preds: dict[str, bool] = {}
        self.steps = 0
        self.watch = watch
        self.special = {"%tid.x": 32 * warp, "%laneid": 0, "%ctaid.x": block[0], "%ctaid.y": block[1],
                        "%ctaid.z": block[2], "%smid": sm, "%warpid": warp + 8, "%gridid": grid,
                        "%globaltimer": 10**9, "%cluster_nctaid.x": cluster[0],
                        "%cluster_nctaid.y": cluster[1], "%cluster_nctaid.z": cluster[2]}

    @staticmethod
    def _parse(ptx: str, kernel: str) -> tuple[list[str], dict[str, int]]:
        m = re.search(r"\.entry\s+" + re.escape(kernel) + r"\s*\(", ptx)
        if m is None:
            raise PtxError(f"no kernel {kernel}")
        body = ptx[ptx.index("{", m.end()):]
        code: list[str] = []
        labels: dict[str, int] = {}
        depth = 0
        for raw in body.split("\n"):
            line = raw.split("//", 1)[0].strip()
            if line in ("{", "}"):  # scopes (braces inside an instruction are operands)
                depth += 1 if line == "{" else -1
                if depth == 0:
                    break
                continue
            if not line or line.startswith("."):
                continue
            m = _LABEL_RE.match(line)
            if m:
                labels[m.group(1)] = len(code)
                continue
            code.append(line.rstrip(";").strip())
        return code, labels

    # -- operands --------------------------------------------------------

    def _value(self, text: str, bits: int = 64) -> int:
        text = text.strip()
        if text in self.regs:
            return self.regs[text]
        if text in self.special:
            return self.special[text]
        if text in ("%clock", "%clock64"):
            return self.steps * 4 if text == "%clock64" else (self.steps * 4) & M32
        if text in self.symbols:
            return self.symbols[text]
        if text in self.params:
            return self.params[text]
        if re.match(r"^-?(0x[0-9a-fA-F]+|\d+)$", text):
            return _int(text) & ((1 << bits) - 1)
        if text.startswith(("smprof2_", "%r", "%rd", "%p")):
            raise PtxError(f"register {text} read before it was written")
        raise PtxError(f"operand {text!r} unknown to the model")

    def _pred(self, text: str) -> bool:
        neg = text.startswith("!")
        name = text[1:] if neg else text
        if name not in self.preds:
            raise PtxError(f"predicate {name} read before it was written")
        return self.preds[name] != neg

    def _address(self, text: str) -> tuple[str, int]:
        m = _MEM_RE.match(text.strip())
        if m is None:
            raise PtxError(f"address {text!r} unknown to the model")
        off = _int(m.group(2)) if m.group(2) else 0
        return m.group(1), off

    @staticmethod
    def _operands(text: str) -> list[str]:
        out, depth, cur = [], 0, ""
        for ch in text:
            if ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
            if ch == "," and depth == 0:
                out.append(cur.strip())
                cur = ""
            else:
                cur += ch
        if cur.strip():
            out.append(cur.strip())
        return out

    @staticmethod
    def _vector(text: str) -> list[str]:
        text = text.strip()
        if not (text.startswith("{") and text.endswith("}")):
            raise PtxError(f"vector operand {text!r} unknown to the model")
        return [t.strip() for t in text[1:-1].split(",")]

    # -- execution -------------------------------------------------------

    def run(self, max_steps: int = 1_000_000) -> None:
        pc = 0
        while True:
            if pc >= len(self.code):
                raise PtxError("ran off the end of the kernel")
            if self.steps >= max_steps:
                raise PtxError("too many steps (a loop that does not end?)")
            if self.watch:
                self.watch(self)
            self.steps += 1
            line = self.code[pc]
            pc += 1
            guard = None
            if line.startswith("@"):
                guard, line = line.split(None, 1)
                if not self._pred(guard[1:]):
                    continue
            op, _, rest = line.partition(" ")
            args = self._operands(rest)
            if op == "ret":
                return
            if op in ("bra", "bra.uni"):
                if args[0] not in self.labels:
                    raise PtxError(f"branch to unknown label {args[0]}")
                pc = self.labels[args[0]]
                continue
            self._execute(op, args)

    def _set(self, name: str, value: int, bits: int) -> None:
        self.regs[name] = value & ((1 << bits) - 1)

    def _execute(self, op: str, a: list[str]) -> None:
        parts = op.split(".")
        base = parts[0]
        bits = 64 if parts[-1] in ("u64", "b64", "s64") else 32
        if parts[-1] == "pred" and base in ("and", "or"):
            x, y = self._pred(a[1]), self._pred(a[2])
            self.preds[a[0]] = (x and y) if base == "and" else (x or y)
        elif base == "mov":
            if parts[-1] == "pred":
                self.preds[a[0]] = a[1] == "1" if a[1] in ("0", "1") else self._pred(a[1])
            elif a[0].startswith("{"):  # unpack a 64-bit value into two words
                lo, hi = self._vector(a[0])
                v = self._value(a[1])
                self._set(lo, v, 32)
                self._set(hi, v >> 32, 32)
            elif a[1].startswith("{"):  # pack two words
                lo, hi = self._vector(a[1])
                self._set(a[0], self._value(lo, 32) | self._value(hi, 32) << 32, 64)
            else:
                self._set(a[0], self._value(a[1], bits), bits)
        elif base == "ld":
            sym, off = self._address(a[1])
            n = bits // 8
            if parts[1] == "const":
                data = self.const[sym]
                self._set(a[0], int.from_bytes(data[off:off + n], "little"), bits)
            elif parts[1] == "param":
                self._set(a[0], self.params[sym], bits)
            else:
                raise PtxError(f"{op} unknown to the model")
        elif base == "not":
            self._set(a[0], ~self._value(a[1], bits), bits)
        elif base in ("add", "sub", "and", "or", "xor", "shl", "shr", "min"):
            x, y = self._value(a[1], bits), self._value(a[2], bits)
            if base == "add":
                r = x + y
            elif base == "sub":
                r = x - y
            elif base == "and":
                r = x & y
            elif base == "or":
                r = x | y
            elif base == "xor":
                r = x ^ y
            elif base == "shl":
                r = x << y
            elif base == "shr":
                r = x >> y
            else:
                r = min(x, y)
            self._set(a[0], r, bits)
        elif base == "cvt":
            self._set(a[0], self._value(a[1]), 64 if parts[1] in ("u64", "s64") else 32)
        elif base == "cvta":
            self._set(a[0], self._value(a[1]), 64)
        elif base == "redux":  # one lane for its warp (see the module's comment)
            self._set(a[0], self._value(a[1], 32), 32)
        elif base == "setp":
            self._setp(parts, a)
        elif base == "atom" and parts[-2:] == ["add", "u32"]:
            reg, off = self._address(a[1])
            addr = self._value(reg) + off
            old = self.arena.read(addr, 4)
            self.arena.write(addr, 4, old + self._value(a[2], 32))
            self._set(a[0], old, 32)
        elif base == "red" and parts[-2:] == ["add", "u64"]:
            reg, off = self._address(a[0])
            addr = self._value(reg) + off
            self.arena.write(addr, 8, self.arena.read(addr, 8) + self._value(a[1]))
        elif base == "st" and parts[1] == "global":
            reg, off = self._address(a[0])
            addr = (self._value(reg) + off) & M64
            words = self._vector(a[1]) if parts[2] in ("v2", "v4") else [a[1]]
            n = 8 if parts[-1] in ("u64", "b64") else 4
            if addr % (n * len(words)) != 0:  # the hardware faults on a misaligned access
                raise PtxError(f"{op} at {addr:#x} is not aligned to {n * len(words)} bytes")
            for i, w in enumerate(words):
                self.arena.write(addr + i * n, n, self._value(w, 8 * n))
        else:
            raise PtxError(f"instruction {op} unknown to the model")

    def _setp(self, parts: list[str], a: list[str]) -> None:
        cmp = parts[1]
        combine = parts[2] if parts[2] in ("and", "or") else None
        ty = parts[-1]
        bits = 64 if ty.endswith("64") else 32
        x, y = self._value(a[1], bits), self._value(a[2], bits)
        if ty.startswith("s"):
            x -= (x >> (bits - 1)) << bits
            y -= (y >> (bits - 1)) << bits
        r = {"eq": x == y, "ne": x != y, "gt": x > y, "ge": x >= y, "lt": x < y, "le": x <= y}[cmp]
        if combine == "and":
            r = r and self._pred(a[3])
        elif combine == "or":
            r = r or self._pred(a[3])
        self.preds[a[0]] = r
