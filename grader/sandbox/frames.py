"""Messages between the grader and a sandboxed process: JSON objects, length-prefixed.

Both sides import this module. The sandboxed side reads and writes with plain blocking calls
(`read`, `write`); the grader never blocks on a process it does not trust, and reads with
`Reader`, which checks a monotonic deadline on every iteration.
"""

from __future__ import annotations

import json
import os
import re
import select
import struct
import time

MAX_FRAME_BYTES = 64 * 1024 * 1024
# Counted in the raw bytes before parsing: 64 MiB of `[{},{},...]` would parse into 1.4 GB of
# Python objects. Honest frames carry arrays as base64 text and hold far fewer of either.
MAX_CONTAINERS = 1_000_000  # JSON objects and arrays
MAX_SEPARATORS = 8_000_000  # commas, one per further item
_HEADER = struct.Struct(">I")


class FrameError(Exception):
    """The other side sent bytes that are not a well-formed frame."""


class Late(Exception):
    """The deadline passed before the frame was read or written."""


class Closed(Exception):
    """The other side closed its end of the pipe."""


def pack(message: dict) -> bytes:
    body = json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if len(body) > MAX_FRAME_BYTES:
        raise ValueError(f"a message of {len(body)} bytes is larger than the limit")
    return _HEADER.pack(len(body)) + body


def parse(body: bytes) -> dict:
    if body.count(b"{") + body.count(b"[") > MAX_CONTAINERS or body.count(b",") > MAX_SEPARATORS:
        raise FrameError("malformed frame: more JSON items than any value may hold")
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FrameError(f"malformed frame: {str(exc)[:200]}") from None
    if type(message) is not dict:
        raise FrameError("a frame must hold a JSON object")
    if b"\\ud" in body or b"\\uD" in body:  # rare: honest frames hold base64 and plain text
        _replace_lone_surrogates(message)
    return message


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _replace_lone_surrogates(message: dict) -> None:
    """JSON's \\udXXX escapes can make text that is not Unicode (a lone surrogate): any report
    or gradebook it reached could not be written. Each becomes U+FFFD, in keys and values."""
    pending: list = [message]
    while pending:
        node = pending.pop()
        if type(node) is dict:
            entries = [(_LONE_SURROGATE.sub("\ufffd", k), v) for k, v in node.items()]
            node.clear()
            node.update(entries)
            keys = list(node)
        else:
            keys = range(len(node))
        for key in keys:
            value = node[key]
            if type(value) is str:
                node[key] = _LONE_SURROGATE.sub("\ufffd", value)
            elif type(value) in (dict, list):
                pending.append(value)


def _length(header: bytes) -> int:
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise FrameError(f"a frame of {length} bytes exceeds the {MAX_FRAME_BYTES} byte limit")
    return length


# ---------------------------------------------------------------- the sandboxed side


def _read_exactly(fd: int, count: int) -> bytes:
    chunks = []
    while count:
        chunk = os.read(fd, min(count, 1 << 20))
        if not chunk:
            raise Closed("the other side closed the pipe")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def read(fd: int) -> dict:
    return parse(_read_exactly(fd, _length(_read_exactly(fd, _HEADER.size))))


def write(fd: int, message: dict) -> None:
    data = memoryview(pack(message))
    while data:
        data = data[os.write(fd, data) :]


# ---------------------------------------------------------------- the grader's side


class Reader:
    """Frames from an untrusted pipe, within deadlines, while draining a second pipe.

    The second pipe (the process's printed output) is read alongside so the process never
    blocks on a full pipe; its first `keep` bytes are kept for the report.
    """

    def __init__(self, fd: int, output_fd: int | None = None, keep: int = 32 * 1024):
        self.fd, self.output_fd, self.keep = fd, output_fd, keep
        os.set_blocking(fd, False)
        if output_fd is not None:
            os.set_blocking(output_fd, False)
        self.buffer = bytearray()
        self.output = bytearray()
        self.dropped = 0
        self.bytes_read = 0

    def _wait(self, deadline: float, write_fd: int | None = None) -> None:
        """Block until the frame pipe is readable (or `write_fd` writable), draining output."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Late
            readers = [] if write_fd is not None else [self.fd]
            readers += [self.output_fd] if self.output_fd is not None else []
            writers = [write_fd] if write_fd is not None else []
            ready_r, ready_w, _ = select.select(readers, writers, [], left)
            if self.output_fd is not None and self.output_fd in ready_r:
                self._drain()
            if ready_w or (write_fd is None and self.fd in ready_r):
                return

    def _drain(self) -> None:
        try:
            chunk = os.read(self.output_fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:  # closed: stop watching it
            self.output_fd = None
            return
        room = max(0, self.keep - len(self.output))
        self.output += chunk[:room]
        self.dropped += len(chunk) - min(room, len(chunk))

    def _fill(self, count: int, deadline: float) -> bytes:
        while len(self.buffer) < count:
            self._wait(deadline)
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise Closed("the process closed its pipe")
            self.buffer += chunk
            self.bytes_read += len(chunk)
        data = bytes(self.buffer[:count])
        del self.buffer[:count]
        return data

    def read(self, deadline: float) -> dict:
        """The next frame, read and parsed by `deadline`: a reply built to be slow to parse
        (millions of JSON items) spends the sender's time, not the grader's."""
        message = parse(self._fill(_length(self._fill(_HEADER.size, deadline)), deadline))
        if time.monotonic() > deadline:
            raise Late
        return message

    def write(self, fd: int, message: dict, deadline: float) -> None:
        """Send `message` on `fd` (non-blocking), still draining output, within `deadline`."""
        data = memoryview(pack(message))
        while data:
            if time.monotonic() > deadline:
                raise Late
            try:  # a pipe usually has room: write first, wait only when it is full
                data = data[os.write(fd, data) :]
            except BlockingIOError:
                self._wait(deadline, write_fd=fd)
            except BrokenPipeError:
                raise Closed("the process closed its pipe") from None

    def printed(self) -> str:
        text = self.output.decode("utf-8", errors="replace")
        return text + (
            f"\n... ({self.dropped} more bytes of output dropped)" if self.dropped else ""
        )
