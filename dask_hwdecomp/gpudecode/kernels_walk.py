"""Length-prefixed byte arrays walked a page a thread block: dictionary pages and PLAIN pages.

A PLAIN byte array is a 4-byte little-endian length and then the bytes,
value after value, so where value ``i + 1`` starts depends on every length
before it: the walk is serial by format, and one thread following the
chain of a 1 MB page of short strings takes milliseconds. Here the page's
block walks it in parallel by *speculating and checking*:

1. the page is cut into at most :data:`SEGMENTS` segments of at least
   :data:`MIN_SEGMENT` bytes; a thread takes a segment and *guesses* where
   its first value starts: the first byte from the segment's start whose
   chain of :data:`PROBE` lengths stays inside the page (inside text or
   random bytes a wrong start soon reads a length past the page; the
   first segment's start is the page's), or the last of up to four such
   bytes in a row (a start just before a prefix reads its low bytes as a
   longer length, and that chain can land on the true one). From its guess it walks the
   chain until a prefix starts past the segment, and notes the values it
   walked, where it left and any error;
2. one thread follows the true chain across the segments: where a guess
   is exactly where the chain enters its segment, the segment's walk *is*
   the chain's there and is taken in one step; where it is not (a wrong
   guess, none found, or no value starting in the segment), that thread
   walks the segment itself. It notes each segment's true start, its first
   value's index and how many of its values the walk keeps (the walk stops
   at the page's ``n`` values, or at an error);
3. every thread walks its segments again from their true starts and
   writes each value's length and where its bytes start.

Correctness does not depend on the guesses: a segment's own walk is used
only when it started exactly where the chain enters, and a walk from a
position is the same whoever does it. Wrong guesses cost time (step 2
walks those segments serially), never a different result. Every step is
bounded by its segment or the page, so a hostile page costs at most a
serial walk.

The results and errors are those of the serial walk: ``E_VALUES`` when a
length prefix runs past the page, ``E_LENGTH`` when a value does; values
before the error are written, none after it or past the ``n`` walked.
"""

from __future__ import annotations

import numba
import numpy as np

from ..gpu.cuda_jit import cuda
from .kernels_delta import E_COUNT, E_LENGTH, E_VALUES, ENC_PLAIN, K_BYTES, P_DICTIONARY, set_error

__all__ = ["THREADS", "SEGMENTS", "MIN_SEGMENT", "GUESS_SPAN", "PROBE", "SHARED_WORDS", "walk_kernel",
           "walk_lengths"]

_SIM = bool(getattr(numba.config, "ENABLE_CUDASIM", 0))
# Threads of the walk kernel's blocks.
THREADS = 16 if _SIM else 256
# Segments a page is cut into at most, and the fewest bytes a segment has
# (the simulator's are small, so that small test pages cross many).
SEGMENTS = 32 if _SIM else 512
MIN_SEGMENT = 16 if _SIM else 256
# Bytes from a segment's start searched for its first value's prefix
# (a segment inside a longer value has none: step 2 walks it, a few values).
GUESS_SPAN = 48 if _SIM else 512
# Lengths a guess's chain must follow inside the page.
PROBE = 4
# The block's shared int64 words: four a segment, then the walk's error.
# After step 1 a segment's are its guess, the values walked from it, where
# that walk left and its error; after step 2 its true start, its first
# value's index, the values to write (and the error, no longer read).
SHARED_WORDS = 4 * SEGMENTS + 1
_START, _INDEX, _COUNT, _ERROR = 0, SEGMENTS, 2 * SEGMENTS, 3 * SEGMENTS
_RESULT = 4 * SEGMENTS
_UNBOUNDED = np.int64(1) << np.int64(62)


@cuda.jit(device=True, cache=True)
def _length(data, x):
    """The 4-byte little-endian length at byte ``x`` of ``data``."""
    return (np.int64(data[x]) | (np.int64(data[x + 1]) << np.int64(8)) | (np.int64(data[x + 2]) << np.int64(16))
            | (np.int64(data[x + 3]) << np.int64(24)))


@cuda.jit(device=True, cache=True)
def _plausible(data, y, end):
    """Whether :data:`PROBE` lengths chained from ``y`` stay inside the page ending at ``end``."""
    x = y
    for _ in range(PROBE):
        if x == end:
            return True
        if x + 4 > end:
            return False
        ln = _length(data, x)
        if ln > end - x - 4:
            return False
        x += 4 + ln
    return True


@cuda.jit(device=True, cache=True)
def _walk(data, x, hi, end, limit, out_len, out_src, at):
    """Walk from ``x`` while a prefix starts before ``hi``, at most ``limit`` values.

    Returns (values walked, where the walk left, error). With ``at >= 0``
    value ``j``'s length and first byte go to ``out_len[at + j]`` and
    ``out_src[at + j]``.
    """
    m = np.int64(0)
    err = np.int64(0)
    while x < hi and m < limit:
        if x + 4 > end:
            err = np.int64(E_VALUES)
            break
        ln = _length(data, x)
        if ln > end - x - 4:
            err = np.int64(E_LENGTH)
            break
        if at >= 0:
            out_len[at + m] = ln
            out_src[at + m] = x + 4
        m += 1
        x += 4 + ln
    return m, x, err


@cuda.jit(device=True, cache=True)
def walk_lengths(data, pos, end, n, out_len, out_src, base, sh):
    """Walk ``n`` length-prefixed values of ``data[pos:end]`` with the whole block.

    Value ``i``'s length goes to ``out_len[base + i]``, the offset of its
    first byte in ``data`` to ``out_src[base + i]``. Every thread of the
    block calls it and gets the same result: 0, ``E_VALUES`` or
    ``E_LENGTH``. ``sh``: :data:`SHARED_WORDS` shared int64.
    """
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    cuda.syncthreads()  # a previous walk's readers are done with sh
    if n <= 0:
        return np.int64(0)
    size = end - pos
    seg = (size + SEGMENTS - 1) // SEGMENTS
    if seg < MIN_SEGMENT:
        seg = np.int64(MIN_SEGMENT)
    nseg = (size + seg - 1) // seg
    if nseg < 1:
        nseg = np.int64(1)
    # 1. every segment walked from its guess
    k = t
    while k < nseg:
        lo = pos + k * seg
        hi = min(lo + seg, end)
        guess = np.int64(-1)
        if k == 0:
            guess = pos
        else:
            y = lo
            stop = min(lo + GUESS_SPAN, hi)
            while y < stop:
                if _plausible(data, y, end):
                    # A start a byte or three before a prefix reads that
                    # prefix's low bytes as a longer length, and its chain may
                    # land on the true one: take the last of a run of starts.
                    j = 0
                    while j < 3 and y + 1 < hi and _plausible(data, y + 1, end):
                        y += 1
                        j += 1
                    guess = y
                    break
                y += 1
        m = np.int64(0)
        left = lo
        err = np.int64(0)
        if guess >= 0:
            m, left, err = _walk(data, guess, hi, end, _UNBOUNDED, out_len, out_src, -1)
        sh[_START + k] = guess
        sh[_INDEX + k] = m
        sh[_COUNT + k] = left
        sh[_ERROR + k] = err
        k += nt
    cuda.syncthreads()
    # 2. the true chain across the segments
    if t == 0:
        x = pos
        i = np.int64(0)
        result = np.int64(0)
        done = False
        for k in range(nseg):
            hi = min(pos + (k + 1) * seg, end)
            if done or x >= hi:
                sh[_START + k] = -1
                sh[_COUNT + k] = 0
                continue
            if sh[_START + k] == x:
                m = sh[_INDEX + k]
                left = sh[_COUNT + k]
                err = sh[_ERROR + k]
            else:
                m, left, err = _walk(data, x, hi, end, _UNBOUNDED, out_len, out_src, -1)
            sh[_START + k] = x
            sh[_INDEX + k] = i
            if i + m >= n:
                sh[_COUNT + k] = n - i
                i = n
                done = True
            else:
                sh[_COUNT + k] = m
                i += m
                x = left
                if err != 0:
                    result = err
                    done = True
        if not done and i < n:
            result = np.int64(E_VALUES)
        sh[_RESULT] = result
    cuda.syncthreads()
    # 3. every segment's values written from its true start
    k = t
    while k < nseg:
        w = sh[_COUNT + k]
        if w > 0:
            _walk(data, sh[_START + k], end, end, w, out_len, out_src, base + sh[_INDEX + k])
        k += nt
    return sh[_RESULT]


@cuda.jit(device=True, cache=True)
def _walk_page(p, data, chunks, pages, vstart, vend, valid, lengths, dict_off, dict_len, sa, sb, sh):
    t = cuda.threadIdx.x
    if pages[p]["error"] != 0:
        return
    c = pages[p]["chunk"]
    if chunks[c]["kind"] != K_BYTES:
        return
    if pages[p]["kind"] == P_DICTIONARY:
        pos = pages[p]["offset"]
        end = pos + pages[p]["size"]
        if end > data.shape[0]:
            if t == 0:
                set_error(pages, p, E_VALUES)
            return
        base = chunks[c]["dict_base"]
        n = np.int64(pages[p]["num_values"])
        if n < 0 or base + n > dict_off.shape[0]:
            if t == 0:
                set_error(pages, p, E_COUNT)
            return
        err = walk_lengths(data, pos, end, n, dict_len, dict_off, base, sh)
    elif pages[p]["encoding"] == ENC_PLAIN:
        # The measure kernel checks the page again and reports what is wrong.
        lo = pages[p]["offset"]
        s = vstart[p]
        e = vend[p]
        n = np.int64(pages[p]["nonnull"])
        rows = np.int64(pages[p]["num_values"])
        base = pages[p]["row_start"]
        if (s < lo or e > lo + pages[p]["size"] or s > e or e > data.shape[0] or n > rows or n < 0
                or base + rows > valid.shape[0] or base + rows > lengths.shape[0]):
            return
        err = walk_lengths(data, s, e, n, sa, sb, base, sh)
    else:
        return
    if err != 0 and t == 0:
        set_error(pages, p, err)


@cuda.jit(cache=True)
def walk_kernel(data, chunks, pages, vstart, vend, valid, lengths, dict_off, dict_len, sa, sb):
    """A block a page: BYTES dictionary pages into ``dict_len``/``dict_off``, PLAIN data pages into ``sa``/``sb``.

    ``sa``/``sb`` are in the page's value space (``row_start + i``).
    Launch with :data:`THREADS` threads a block.
    """
    sh = cuda.shared.array(SHARED_WORDS, numba.int64)
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        _walk_page(p, data, chunks, pages, vstart, vend, valid, lengths, dict_off, dict_len, sa, sb, sh)
        cuda.syncthreads()

