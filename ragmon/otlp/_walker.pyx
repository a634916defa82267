# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled protobuf decoder: ``ragmon.otlp.decode.decode_protobuf``, walking the wire bytes.

Same spans, same counts, same ``DecodeError`` as the pure-Python decoder, which parses with
upb into ``ragmon.otlp.wire.TraceRequest`` and reads the parsed message (the same message too,
but of a body with several faults upb may name another one first: it checks a string's UTF-8
before it finds that the string runs past its message):

1. ``_validate`` walks the whole body as upb parses it (a big one without the GIL): the schema of
   ``wire.py`` (a declared field with another wire type is an unknown field), every tag,
   varint, length and group checked, declared strings checked as UTF-8, messages and groups
   nested at most 100 deep (upb's limit), field number 0 refused except inside a skipped group.
2. The walk that builds spans trusts the bytes (still bounds-checked) and reads them as the
   parsed message reads: the last value of a repeated scalar wins, a message field sent twice
   is merged (its bytes concatenated), a ``oneof`` member replaces the others, an attribute
   map keeps the last entry of a key, and a map entry with an unknown field is not in the map
   (upb keeps it as unknown bytes).

Attribute values take the Python decoder's inline paths here (ASCII strings, numbers, flat
arrays); every other value goes through its ``_keep`` with ``_read`` below as the reader, so
bounded walks, cuts and sizes are the same code.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_DelItem, PyDict_GetItem, PyDict_SetItem
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_GET_LENGTH
from cpython.long cimport PyLong_FromLongLong, PyLong_FromUnsignedLongLong
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.string cimport memcmp, memcpy

import sys
from functools import lru_cache

from ragmon.errors import DecodeError, DecodedTooLargeError

if sys.byteorder != "little":  # fixed-width fields are copied as they are; decode.py falls back to Python
    raise ImportError("the compiled OTLP decoder reads little-endian hosts only")

cdef extern from "Python.h":
    object PyUnicode_DecodeASCII(const char* s, Py_ssize_t size, const char* errors)
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    object PyFloat_FromDouble(double v)
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object text)
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL

# -- the wire -------------------------------------------------------------------------------------



cdef enum:
    VARINT = 0
    I64 = 1
    LEN = 2
    SGROUP = 3
    EGROUP = 4
    I32 = 5
    MAX_DEPTH = 100  # upb's default: a message or group nested deeper does not parse
    _MAX_SEEN_KEYS = 4096  # prefix-matched attribute keys kept once per selection (bounds a hostile stream)
    _SEEN_SLOTS = 8192  # their table: a power of two, at most half full
    _MAX_SHARED_KEY_BYTES = 256  # longer keys are never kept (a hostile stream of long keys)
    OK = 0
    CORRUPT = 1
    BAD_UTF8 = 2
    TOO_DEEP = 3
    M_REQUEST = 0
    M_RESOURCE_SPANS = 1
    M_RESOURCE = 2
    M_ENTRY = 3
    M_SCOPE_SPANS = 4
    M_SPAN = 5
    M_EVENT = 6
    M_STATUS = 7
    M_KEY_VALUE = 8
    M_ANY = 9
    M_ARRAY = 10
    M_KVLIST = 11
    C_SCALAR = -1
    C_STRING = -2
    C_UNKNOWN = -3


_MESSAGES = {
    CORRUPT: "Wire format was corrupt",
    BAD_UTF8: "String field had bad UTF-8",
    TOO_DEEP: "Exceeded upb_DecodeOptions_MaxDepth",
}
_UNBOUNDED = sys.maxsize
_PREFIX = "invalid OTLP protobuf: Error parsing message with type 'ragmon.otlp.wire.v1.TraceRequest': "

ctypedef const unsigned char* Buf


cdef inline bint _varint(Buf p, Py_ssize_t* pos, Py_ssize_t end, uint64_t* out) noexcept nogil:
    """A varint of at most 10 bytes (bits past 64 dropped, as upb does); False if cut short."""
    cdef uint64_t value = 0
    cdef unsigned char byte
    cdef int i
    for i in range(10):
        if pos[0] >= end:
            return False
        byte = p[pos[0]]
        pos[0] += 1
        value |= (<uint64_t>(byte & 0x7F)) << (7 * i)
        if not (byte & 0x80):
            out[0] = value
            return True
    return False


cdef inline bint _tag(Buf p, Py_ssize_t* pos, Py_ssize_t end, uint32_t* field, int* wire, bint in_group=False) noexcept nogil:
    """A field tag: at most 5 bytes, a 32-bit value, wire type 0-5, field number not 0 (upb
    lets 0 pass in a group it skips)."""
    cdef Py_ssize_t start = pos[0]
    cdef uint64_t value
    if not _varint(p, pos, end, &value) or pos[0] - start > 5 or value > <uint64_t>0xFFFFFFFFU:
        return False
    field[0] = <uint32_t>(value >> 3)
    wire[0] = <int>(value & 7)
    return (field[0] != 0 or in_group) and wire[0] <= 5


cdef inline bint _length(Buf p, Py_ssize_t* pos, Py_ssize_t end, Py_ssize_t* size) noexcept nogil:
    """A length prefix (a varint of at most 5 bytes) that fits in what is left."""
    cdef uint64_t value
    cdef Py_ssize_t start = pos[0]
    if (not _varint(p, pos, end, &value) or pos[0] - start > 5 or value >= <uint64_t>0x7FFFFFFF
            or <Py_ssize_t>value > end - pos[0]):
        return False
    size[0] = <Py_ssize_t>value
    return True


cdef int _skip(Buf p, Py_ssize_t* pos, Py_ssize_t end, uint32_t field, int wire, int depth) noexcept nogil:
    """Step over one unknown field (a group with everything in it) of a message at ``depth``."""
    cdef uint64_t value
    cdef Py_ssize_t size
    cdef uint32_t inner
    cdef int inner_wire, status
    if wire == VARINT:
        return OK if _varint(p, pos, end, &value) else CORRUPT
    if wire == I64 or wire == I32:
        size = 8 if wire == I64 else 4
        if end - pos[0] < size:
            return CORRUPT
        pos[0] += size
        return OK
    if wire == LEN:
        if not _length(p, pos, end, &size):
            return CORRUPT
        pos[0] += size
        return OK
    if wire == SGROUP:
        if depth + 1 > MAX_DEPTH:
            return CORRUPT
        while True:
            if not _tag(p, pos, end, &inner, &inner_wire, True):
                return CORRUPT
            if inner_wire == EGROUP:
                return OK if inner == field else CORRUPT
            status = _skip(p, pos, end, inner, inner_wire, depth + 1)
            if status != OK:
                return status
    return CORRUPT  # an end-group tag outside its group


cdef bint _utf8(Buf p, Py_ssize_t n) noexcept nogil:
    """Valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF)."""
    cdef Py_ssize_t i = 0
    cdef unsigned char c, c1
    cdef int extra
    while i < n:
        c = p[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2 or c > 0xF4:
            return False
        extra = 1 if c < 0xE0 else (2 if c < 0xF0 else 3)
        if i + extra >= n:
            return False
        c1 = p[i + 1]
        if (c1 & 0xC0) != 0x80:
            return False
        if c == 0xE0 and c1 < 0xA0:
            return False
        if c == 0xED and c1 > 0x9F:
            return False
        if c == 0xF0 and c1 < 0x90:
            return False
        if c == 0xF4 and c1 > 0x8F:
            return False
        if extra >= 2 and (p[i + 2] & 0xC0) != 0x80:
            return False
        if extra == 3 and (p[i + 3] & 0xC0) != 0x80:
            return False
        i += extra + 1
    return True


cdef inline bint _ascii(Buf p, Py_ssize_t n) noexcept nogil:
    """No byte with the high bit set (8 bytes a step)."""
    cdef Py_ssize_t i = 0
    cdef uint64_t word, seen = 0
    while i + 8 <= n:
        memcpy(&word, p + i, 8)
        seen |= word
        i += 8
    if seen & <uint64_t>0x8080808080808080ULL:
        return False
    while i < n:
        if p[i] & 0x80:
            return False
        i += 1
    return True


# The schema of wire.py: per message type and field number, the wire type and what it holds.



cdef inline int _declared(int message, uint32_t field, int* wire) noexcept nogil:
    """What a declared field holds (a message type, ``C_STRING``, ``C_SCALAR`` for numbers and
    bytes) and its wire type; ``C_UNKNOWN`` for a field the schema does not declare."""
    wire[0] = LEN
    if message == M_REQUEST:
        if field == 1:
            return M_RESOURCE_SPANS
    elif message == M_RESOURCE_SPANS:
        if field == 1:
            return M_RESOURCE
        if field == 2:
            return M_SCOPE_SPANS
    elif message == M_RESOURCE:
        if field == 1:
            return M_ENTRY
    elif message == M_ENTRY or message == M_KEY_VALUE:
        if field == 1:
            return C_STRING
        if field == 2:
            return M_ANY
    elif message == M_SCOPE_SPANS:
        if field == 2:
            return M_SPAN
    elif message == M_SPAN:
        if field == 1 or field == 2 or field == 4:
            return C_SCALAR
        if field == 5:
            return C_STRING
        if field == 6:
            wire[0] = VARINT
            return C_SCALAR
        if field == 7 or field == 8:
            wire[0] = I64
            return C_SCALAR
        if field == 9:
            return M_ENTRY
        if field == 11:
            return M_EVENT
        if field == 15:
            return M_STATUS
        if field == 16:
            wire[0] = I32
            return C_SCALAR
    elif message == M_EVENT:
        if field == 1:
            wire[0] = I64
            return C_SCALAR
        if field == 2:
            return C_STRING
        if field == 3:
            return M_KEY_VALUE
    elif message == M_STATUS:
        if field == 3:
            wire[0] = VARINT
            return C_SCALAR
    elif message == M_ANY:
        if field == 1:
            return C_STRING
        if field == 2 or field == 3:
            wire[0] = VARINT
            return C_SCALAR
        if field == 4:
            wire[0] = I64
            return C_SCALAR
        if field == 5:
            return M_ARRAY
        if field == 6:
            return M_KVLIST
        if field == 7:
            return C_SCALAR
    elif message == M_ARRAY:
        if field == 1:
            return M_ANY
    elif message == M_KVLIST:
        if field == 1:
            return M_KEY_VALUE
    return C_UNKNOWN


cdef int _validate(Buf p, Py_ssize_t pos, Py_ssize_t end, int message, int depth) noexcept nogil:
    """Check one message (at ``depth``) as upb parses it: ``OK`` or the first fault."""
    cdef uint32_t field
    cdef int wire, expected, holds, status
    cdef Py_ssize_t size
    cdef uint64_t value
    while pos < end:
        if not _tag(p, &pos, end, &field, &wire):
            return CORRUPT
        holds = _declared(message, field, &expected)
        if holds == C_UNKNOWN or wire != expected:
            status = _skip(p, &pos, end, field, wire, depth)
            if status != OK:
                return status
        elif wire == LEN:
            if not _length(p, &pos, end, &size):
                return CORRUPT
            if holds == C_STRING:
                if not _ascii(p + pos, size) and not _utf8(p + pos, size):
                    return BAD_UTF8
            elif holds >= 0:
                if depth + 1 > MAX_DEPTH:
                    return TOO_DEEP
                status = _validate(p, pos, pos + size, holds, depth + 1)
                if status != OK:
                    return status
            pos += size
        elif wire == VARINT:
            if not _varint(p, &pos, end, &value):
                return CORRUPT
        else:
            size = 8 if wire == I64 else 4
            if end - pos < size:
                return CORRUPT
            pos += size
    return OK


# -- reading trusted bytes --------------------------------------------------------------------------

cdef struct Field:
    uint32_t number
    int wire
    Py_ssize_t start  # of the tag
    Py_ssize_t s      # payload: [s, e) for LEN; the value for VARINT, I64, I32 in ``value``
    Py_ssize_t e
    uint64_t value


cdef int _corrupt() except -1:
    raise DecodeError(_PREFIX + _MESSAGES[CORRUPT])


cdef inline int _next(Buf p, Py_ssize_t* pos, Py_ssize_t end, Field* f) except -1:
    """1 and the next field of a validated message in ``f``, or 0 at its end."""
    if pos[0] >= end:
        return 0
    f.start = pos[0]
    if not _tag(p, pos, end, &f.number, &f.wire):
        return _corrupt()
    if f.wire == LEN:
        if not _length(p, pos, end, &f.e):
            return _corrupt()
        f.s = pos[0]
        pos[0] += f.e
        f.e = pos[0]
    elif f.wire == VARINT:
        if not _varint(p, pos, end, &f.value):
            return _corrupt()
    elif f.wire == I64 or f.wire == I32:
        if end - pos[0] < (8 if f.wire == I64 else 4):
            return _corrupt()
        f.value = 0
        memcpy(&f.value, p + pos[0], 8 if f.wire == I64 else 4)  # little-endian hosts (x86, arm64)
        pos[0] += 8 if f.wire == I64 else 4
    elif _skip(p, pos, end, f.number, f.wire, 0) != OK:
        return _corrupt()
    return 1


cdef struct Any:
    int case        # the oneof member last set (AnyValue field number), 0 for none
    Py_ssize_t s    # string or bytes payload
    Py_ssize_t e
    Py_ssize_t run  # array or key-value list: where the fields that make it up begin
    uint64_t value  # bool, int, double bits


cdef inline int _any(Buf p, Py_ssize_t pos, Py_ssize_t end, Any* a) except -1:
    """Read an ``AnyValue`` (more calls for more pieces of a merged one: state carries over)."""
    cdef Field f
    while _next(p, &pos, end, &f):
        if f.number == 1 and f.wire == LEN or f.number == 7 and f.wire == LEN:
            a.case, a.s, a.e = f.number, f.s, f.e
        elif (f.number == 2 or f.number == 3) and f.wire == VARINT or f.number == 4 and f.wire == I64:
            a.case, a.value = f.number, f.value
        elif (f.number == 5 or f.number == 6) and f.wire == LEN:
            if a.case != <int>f.number:
                a.case, a.run = f.number, f.start
    return 0


cdef inline object _ascii_text(Buf p, Py_ssize_t s, Py_ssize_t e):
    """A str of bytes known to be ASCII (copied as they are: nothing to check again)."""
    text = PyUnicode_New(e - s, 127)
    memcpy(PyUnicode_DATA(text), p + s, e - s)
    return text


cdef inline object _text(Buf p, Py_ssize_t s, Py_ssize_t e):
    if _ascii(p + s, e - s):
        return _ascii_text(p, s, e)
    return PyUnicode_DecodeUTF8(<const char*>p + s, e - s, NULL)


cdef inline object _scalar(Any* a):
    if a.case == 2:
        return a.value != 0
    if a.case == 3:
        return PyLong_FromLongLong(<int64_t>a.value)
    cdef double number
    memcpy(&number, &a.value, 8)
    return PyFloat_FromDouble(number)


cdef class _Raw:
    """An ``AnyValue``'s bytes (``buf[s:e]``), for ``_read``."""

    cdef object buf
    cdef Py_ssize_t s, e

    def __cinit__(self, object buf, Py_ssize_t s, Py_ssize_t e):
        self.buf, self.s, self.e = buf, s, e


def _read(_Raw raw):
    """``_pb_read`` for ``_Raw`` values: the kind and payload of one ``AnyValue``."""
    cdef Buf p = <Buf>PyBytes_AS_STRING(raw.buf)
    cdef Any a
    a.case = 0
    a.run = 0
    a.value = 0
    _any(p, raw.s, raw.e, &a)
    if a.case == 0:
        return 0, None  # _NULL
    if a.case == 1:
        return 2, _text(p, a.s, a.e)  # _STRING
    if a.case == 7:
        return 3, PyBytes_FromStringAndSize(<const char*>p + a.s, a.e - a.s)  # _BYTES
    if a.case == 5:
        return 4, _Items(raw, a.run, 5)  # _ARRAY
    if a.case == 6:
        return 5, _Pairs(raw, a.run)  # _KVLIST
    return 1, _scalar(&a)  # _SCALAR


cdef class _Items:
    """The elements of an array (or the ``KeyValue``s of a list): the values (field 1) of the
    fields ``number`` of ``raw`` from ``run`` on, one ``_Raw`` each, read as they are asked for.
    (An iterator class, not a generator: nothing of the caller's frame is kept.)"""

    cdef _Raw raw
    cdef Py_ssize_t pos, at, end
    cdef uint32_t number

    def __cinit__(self, _Raw raw, Py_ssize_t run, uint32_t number):
        self.raw, self.pos, self.number = raw, run, number
        self.at = self.end = 0

    def __iter__(self):
        return self

    def __next__(self):
        return self.next_item()

    cdef _Raw next_item(self):
        cdef Buf p = <Buf>PyBytes_AS_STRING(self.raw.buf)
        cdef Field f
        while True:
            while _next(p, &self.at, self.end, &f):
                if f.number == 1 and f.wire == LEN:
                    return _Raw(self.raw.buf, f.s, f.e)
            while True:
                if not _next(p, &self.pos, self.raw.e, &f):
                    raise StopIteration
                if f.number == self.number and f.wire == LEN:
                    self.at, self.end = f.s, f.e
                    break


cdef class _Pairs:
    """A key-value list's ``(key, value)`` pairs, read as they are asked for."""

    cdef _Items items

    def __cinit__(self, _Raw raw, Py_ssize_t run):
        self.items = _Items(raw, run, 6)

    def __iter__(self):
        return self

    def __next__(self):
        cdef _Raw item = self.items.next_item()
        cdef Buf p = <Buf>PyBytes_AS_STRING(item.buf)
        cdef Field f
        cdef Py_ssize_t pos = item.s, first = 0, count = 0, ks = 0, ke = 0
        while _next(p, &pos, item.e, &f):
            if f.number == 1 and f.wire == LEN:
                ks, ke = f.s, f.e
            elif f.number == 2 and f.wire == LEN:
                if count == 0:
                    first = f.start
                count += 1
        key = _text(p, ks, ke)
        value = _value_at(item.buf, p, first, count, item.e, &ks, &ke)
        return key, _Raw(value, ks, ke)


# -- the selection, compiled -------------------------------------------------------------------------

cdef inline uint64_t _hash(Buf p, Py_ssize_t n) noexcept nogil:
    """A quick hash of a key: its length, first and last 8 bytes."""
    cdef uint64_t head = 0, tail = 0
    if n >= 8:
        memcpy(&head, p, 8)
        memcpy(&tail, p + n - 8, 8)
    else:
        memcpy(&head, p, n)
    return (head * <uint64_t>0x9E3779B97F4A7C15ULL) ^ (tail * <uint64_t>0xC2B2AE3D27D4EB4FULL) ^ (<uint64_t>n * <uint64_t>0x165667B19E3779F9ULL)


cdef class _Keys:
    """An ``AttributeFilter`` over UTF-8 bytes: exact keys (an open-addressing hash table) and
    prefixes."""

    cdef list keys       # the keys and prefixes as bytes (kept alive: the pointers below are theirs)
    cdef list names      # the filter's own str for each key
    cdef Py_ssize_t* slots  # index + 1 into keys, 0 for an empty slot
    cdef uint64_t mask
    cdef Py_ssize_t nkeys, nprefixes
    cdef const char** text
    cdef Py_ssize_t* size
    cdef list seen       # prefix-matched keys met so far, each kept once (at most _MAX_SEEN_KEYS)
    cdef PyObject** seen_slots  # an open-addressing table over ``seen`` (borrowed: ``seen`` owns them)

    def __cinit__(self, wanted):
        self.keys, self.names = [], []
        self.seen = []
        self.seen_slots = <PyObject**>PyMem_Calloc(_SEEN_SLOTS, sizeof(PyObject*))
        if self.seen_slots == NULL:
            raise MemoryError()
        for key in sorted(wanted.keys):
            try:
                self.keys.append(key.encode("utf-8"))
            except UnicodeEncodeError:  # a lone surrogate: no UTF-8 key equals it
                continue
            self.names.append(key)
        self.nkeys = len(self.keys)
        for prefix in wanted.prefixes:
            try:
                self.keys.append(prefix.encode("utf-8"))
            except UnicodeEncodeError:
                pass
        self.nprefixes = len(self.keys) - self.nkeys
        cdef Py_ssize_t capacity = 8, i
        while capacity < 2 * self.nkeys:
            capacity *= 2
        self.mask = capacity - 1
        self.slots = <Py_ssize_t*>PyMem_Calloc(capacity, sizeof(Py_ssize_t))
        self.text = <const char**>PyMem_Calloc(len(self.keys) + 1, sizeof(char*))
        self.size = <Py_ssize_t*>PyMem_Calloc(len(self.keys) + 1, sizeof(Py_ssize_t))
        if self.slots == NULL or self.text == NULL or self.size == NULL:
            raise MemoryError()
        cdef uint64_t h
        for i in range(len(self.keys)):
            self.text[i] = PyBytes_AS_STRING(self.keys[i])
            self.size[i] = PyBytes_GET_SIZE(self.keys[i])
            if i < self.nkeys:
                h = _hash(<Buf>self.text[i], self.size[i]) & self.mask
                while self.slots[h]:
                    h = (h + 1) & self.mask
                self.slots[h] = i + 1

    def __dealloc__(self):
        PyMem_Free(self.seen_slots)
        PyMem_Free(self.slots)
        PyMem_Free(<void*>self.text)
        PyMem_Free(self.size)

    cdef object match(self, Buf p, Py_ssize_t n):
        """The key as a str if it is wanted (the filter's own object for an exact key), else None."""
        cdef uint64_t h = _hash(p, n) & self.mask
        cdef Py_ssize_t i
        while self.slots[h]:
            i = self.slots[h] - 1
            if self.size[i] == n and memcmp(self.text[i], p, n) == 0:
                return self.names[i]
            h = (h + 1) & self.mask
        for i in range(self.nkeys, self.nkeys + self.nprefixes):
            if self.size[i] <= n and (self.size[i] == 0 or self.text[i][0] == <char>p[0]) and memcmp(self.text[i], p, self.size[i]) == 0:
                return self._shared(p, n)
        return None

    cdef object _shared(self, Buf p, Py_ssize_t n):
        """A prefix-matched key as one str object for every span that has it (an ASCII key of at
        most ``_MAX_SHARED_KEY_BYTES``, while fewer than ``_MAX_SEEN_KEYS`` are kept), found
        from its bytes without making a str:
        spans hold one copy of ``retrieval.documents.3.document.content``, and the conventions'
        lookups of it (their key tables are interned, as these are) compare pointers."""
        if n > _MAX_SHARED_KEY_BYTES or not _ascii(p, n):  # at most 4,096 x 256 bytes are kept
            return _text(p, 0, n)
        cdef uint64_t h = _hash(p, n) & (_SEEN_SLOTS - 1)
        cdef PyObject* found = self.seen_slots[h]
        while found != NULL:
            if PyUnicode_GET_LENGTH(<object>found) == n and memcmp(PyUnicode_DATA(<object>found), p, n) == 0:
                return <object>found
            h = (h + 1) & (_SEEN_SLOTS - 1)
            found = self.seen_slots[h]
        name = _ascii_text(p, 0, n)
        if len(self.seen) < _MAX_SEEN_KEYS:
            name = sys.intern(name)
            self.seen.append(name)
            self.seen_slots[h] = <PyObject*>name
        return name


cdef class _Plan:
    cdef _Keys attributes, resource
    cdef object events
    cdef bint with_events
    cdef Py_ssize_t limit
    cdef object keep_text   # ``DocumentText.keep``, or None: every trace keeps its documents' text
    cdef dict text_kinds    # ``DocumentText.kinds``
    cdef tuple text_tables  # ``DocumentText.tables``

    def __init__(self, selection):
        self.attributes = _Keys.__new__(_Keys, selection.attributes)
        self.resource = _Keys.__new__(_Keys, selection.resource)
        self.events = selection.events
        self.with_events = bool(selection.events)
        self.limit = selection.max_value_chars
        text = selection.document_text
        self.keep_text = None if text is None else text.keep
        self.text_kinds = None if text is None else dict(text.kinds)
        self.text_tables = None if text is None else text.tables


@lru_cache(maxsize=16)
def _compile(selection):
    return _Plan(selection)


cdef object _last_selection = None
cdef _Plan _last_plan = None


cdef _Plan _plan(selection):
    """The compiled selection (the last one by identity: a sidecar decodes with one selection;
    others by value, a few kept)."""
    global _last_selection, _last_plan
    if selection is _last_selection:
        return _last_plan
    plan = _compile(selection)
    _last_selection, _last_plan = None, plan  # never a selection with another's plan (threads)
    _last_selection = selection
    return plan


# -- the Python decoder's pieces (bound on first use: decode.py imports this module) ----------------

cdef object _Span = None, _SpanEvent, _Decoded, _keep, _same, _sizeof = sys.getsizeof
cdef Py_ssize_t _STR, _OBJ, _NUMBER, _TUPLE, _ENTRY, _DICT, _EMPTY_DICT, _SPAN_BASE, _EVENT_BASE, _MAX_EVENTS


cdef _bind():
    global _Span, _SpanEvent, _Decoded, _keep, _same
    global _STR, _OBJ, _NUMBER, _TUPLE, _ENTRY, _DICT, _EMPTY_DICT, _SPAN_BASE, _EVENT_BASE, _MAX_EVENTS
    from ragmon.otlp import decode as py
    if (py._NULL, py._SCALAR, py._STRING, py._BYTES, py._ARRAY, py._KVLIST) != (0, 1, 2, 3, 4, 5):
        raise ImportError("ragmon.otlp.decode's value kinds changed")
    _STR, _OBJ, _NUMBER, _TUPLE = py._STR, py._OBJ, py._NUMBER, py._TUPLE
    _ENTRY, _DICT, _EMPTY_DICT = py._ENTRY, py._DICT, py._EMPTY_DICT
    _SPAN_BASE, _EVENT_BASE, _MAX_EVENTS = py._SPAN_BASE, py._EVENT_BASE, py.MAX_EVENTS
    _SpanEvent, _Decoded, _keep, _same = py.SpanEvent, py.Decoded, py._keep, py._same
    _Span = py.Span


cdef inline Py_ssize_t _text_size(str text):
    return len(text) + _STR if text.isascii() else _sizeof(text) + _OBJ


# -- attributes ------------------------------------------------------------------------------------

cdef struct Tally:
    Py_ssize_t size
    Py_ssize_t cuts
    Py_ssize_t puts  # values put (or dropped for their key's length): more than the dict holds means repeats


cdef object _flat_array(Buf p, Any* a, Py_ssize_t end, Py_ssize_t limit, Py_ssize_t* size):
    """``_pb_flat_array``: a tuple of ASCII strings and numbers within ``limit``, or None."""
    cdef Field outer, inner
    cdef Any item
    cdef Py_ssize_t pos = a.run, at, left = limit, n
    cdef Py_ssize_t total = _TUPLE
    items = []
    while _next(p, &pos, end, &outer):
        if outer.number != 5 or outer.wire != LEN:
            continue
        at = outer.s
        while _next(p, &at, outer.e, &inner):
            if inner.number != 1 or inner.wire != LEN:
                continue
            item.case = 0
            _any(p, inner.s, inner.e, &item)
            if item.case == 1:
                n = item.e - item.s
                if not _ascii(p + item.s, n):
                    return None
                left -= n + 4
                total += n + _STR + 8
                items.append(_ascii_text(p, item.s, item.e))
            elif item.case == 2 or item.case == 3 or item.case == 4:
                left -= 26
                total += _NUMBER + 8
                items.append(_scalar(&item))
            else:
                return None
            if left < 0:
                return None
    size[0] = total
    return tuple(items)


cdef _Raw _joined(object buf, Buf p, Py_ssize_t pos, Py_ssize_t end, uint32_t number):
    """Fields ``number`` (LEN) of ``[pos, end)`` joined: a merged message's bytes."""
    cdef Field f
    pieces = []
    while _next(p, &pos, end, &f):
        if f.number == number and f.wire == LEN:
            pieces.append(PyBytes_FromStringAndSize(<const char*>p + f.s, f.e - f.s))
    joined = b"".join(pieces)
    return _Raw(joined, 0, PyBytes_GET_SIZE(joined))


cdef object _value_at(object buf, Buf p, Py_ssize_t first, Py_ssize_t pieces, Py_ssize_t end,
                      Py_ssize_t* s, Py_ssize_t* e):
    """The ``AnyValue`` of a key-value message (its field 2, ``pieces`` of them from ``first``):
    the bytes object holding it, at ``[s, e)`` (pieces joined when there are several)."""
    cdef Field f
    if pieces <= 1:
        s[0] = e[0] = 0
        if pieces == 1:
            _next(p, &first, end, &f)
            s[0], e[0] = f.s, f.e
        return buf
    raw = _joined(buf, p, first, end, 2)
    s[0], e[0] = 0, raw.e
    return raw.buf


cdef int _put(dict out, object key, Py_ssize_t key_len, bint key_ascii, object buf, Py_ssize_t s, Py_ssize_t e,
              bint flat, Py_ssize_t limit, Tally* t) except -1:
    """One wanted attribute into ``out`` as ``_pb_attributes`` (``flat``: a map's inline paths)
    or ``_keep_all`` (events) puts it; size and cuts into ``t``."""
    cdef Any a
    cdef Py_ssize_t n, extra = 0
    cdef Buf p = <Buf>PyBytes_AS_STRING(buf)
    a.case = 0
    a.run = 0
    a.value = 0
    t.puts += 1
    _any(p, s, e, &a)
    if a.case == 1:
        n = a.e - a.s
        if key_ascii and (key_len + n <= limit if flat else (key_len <= limit and n <= limit)) and _ascii(p + a.s, n):
            PyDict_SetItem(out, key, _ascii_text(p, a.s, a.e))
            t.size += key_len + n
            return 0
    elif (a.case == 2 or a.case == 3 or a.case == 4) and key_len <= limit and key_ascii:
        PyDict_SetItem(out, key, _scalar(&a))
        t.size += key_len + _NUMBER - _STR
        return 0
    elif flat and a.case == 5 and key_len <= limit and key_ascii:
        value = _flat_array(p, &a, e, limit, &extra)
        if value is not None:
            PyDict_SetItem(out, key, value)
            t.size += key_len + extra - _STR
            return 0
    more, cut = _keep(out, key, _Raw(buf, s, e), _read, limit, _same)
    t.size += more
    t.cuts += cut
    return 0


cdef struct Entry:
    Py_ssize_t ks, ke        # key
    Py_ssize_t first, pieces # where the value pieces begin, how many
    bint valid               # a map entry with an unknown field is not in the map


cdef inline int _entry(Buf p, Py_ssize_t pos, Py_ssize_t end, Entry* en) except -1:
    cdef Field f
    en.ks = en.ke = en.first = en.pieces = 0
    en.valid = True
    while _next(p, &pos, end, &f):
        if f.number == 1 and f.wire == LEN:
            en.ks, en.ke = f.s, f.e
        elif f.number == 2 and f.wire == LEN:
            if en.pieces == 0:
                en.first = f.start
            en.pieces += 1
        else:
            en.valid = False
    return 0


cdef class _Map:
    """The attribute map of a span (field 9) or a resource (field 1 of each ``resource`` piece)."""

    cdef dict out
    cdef Tally t
    cdef Py_ssize_t service_s, service_e  # the last ``service.name`` entry (resource), e < 0: none
    cdef dict kinds      # documents' text to leave out (``DocumentText.kinds``), or None
    cdef set deferred    # the content and metadata keys left unread (``""`` and None in ``out``)
    cdef object keep     # ``DocumentText.keep``, until asked (at the first document key met)
    cdef object trace_id


cdef bint _defer(_Map m, object key, Py_ssize_t key_len, Buf p, Py_ssize_t s, Py_ssize_t e, Py_ssize_t limit) except -1:
    """Leave a document's content (a non-empty string) or metadata unread, as ``decode.py``'s
    ``_pb_attributes`` does: True when it did (a placeholder put in ``out``)."""
    cdef PyObject* found = PyDict_GetItem(m.kinds, key)
    cdef Any a
    if found == NULL or key_len > limit:
        return False
    if m.keep is not None:  # asked once a span, and only of a span with documents
        keep, m.keep = m.keep, None
        if keep(m.trace_id):
            m.kinds = None
            return False
    if <object>found is False:
        PyDict_SetItem(m.out, key, None)
    else:
        a.case = 0
        a.run = 0
        a.value = 0
        _any(p, s, e, &a)
        if not (a.case == 1 and a.e > a.s or a.case == 6):  # kept as a non-empty string (a list: its JSON)
            return False
        PyDict_SetItem(m.out, key, "")
    m.deferred.add(key)
    m.t.puts += 1
    return True


cdef int _map_entry(_Map m, object buf, Buf p, Py_ssize_t s, Py_ssize_t e, _Keys keys, Py_ssize_t limit,
                    dict last, bint service) except -1:
    """One map entry: put (or, with ``last``, remember) it if wanted."""
    cdef Entry en
    cdef Py_ssize_t vs, ve
    _entry(p, s, e, &en)
    if not en.valid:
        return 0
    if service and en.ke - en.ks == 12 and memcmp(p + en.ks, b"service.name", 12) == 0:
        m.service_s, m.service_e = s, e
    key = keys.match(p + en.ks, en.ke - en.ks)
    if key is None:
        return 0
    if last is not None:
        last[key] = (s, e)
        return 0
    cdef bint ascii = _ascii(p + en.ks, en.ke - en.ks)
    if not ascii:  # as upb's map lookup does: the key's UTF-8 is cached, sys.getsizeof counts it
        PyUnicode_AsUTF8AndSize(key, NULL)
    vbuf = _value_at(buf, p, en.first, en.pieces, e, &vs, &ve)
    if m.kinds is not None and _defer(m, key, en.ke - en.ks, <Buf>PyBytes_AS_STRING(vbuf), vs, ve, limit):
        return 0
    _put(m.out, key, en.ke - en.ks, ascii, vbuf, vs, ve, True, limit, &m.t)
    return 0


cdef int _map_walk(_Map m, object buf, Buf p, Py_ssize_t s, Py_ssize_t e, uint32_t number, bint nested,
                   _Keys keys, Py_ssize_t limit, dict last, bint service) except -1:
    """Every entry of the map: fields ``number`` of ``[s, e)`` (``nested``: of each such field)."""
    cdef Field f, g
    cdef Py_ssize_t pos = s, at
    while _next(p, &pos, e, &f):
        if f.number != number or f.wire != LEN:
            continue
        if not nested:
            _map_entry(m, buf, p, f.s, f.e, keys, limit, last, service)
            continue
        at = f.s
        while _next(p, &at, f.e, &g):
            if g.number == 1 and g.wire == LEN:
                _map_entry(m, buf, p, g.s, g.e, keys, limit, last, service)
    return 0


cdef _Map _attributes(object buf, Buf p, Py_ssize_t s, Py_ssize_t e, uint32_t number, bint nested,
                      _Keys keys, Py_ssize_t limit, bint service, _Plan text=None, object trace_id=None):
    """``_pb_attributes`` over the map: the kept dict, its size and cuts in ``t``; ``text``: the
    plan whose documents' text is left out (``decode.py``'s ``DocumentText``) unless the trace
    ``trace_id`` keeps it."""
    cdef _Map m = _Map()
    cdef Entry en
    cdef Py_ssize_t at, to
    m.out = {}
    m.t.size = m.t.cuts = m.t.puts = 0
    m.service_s, m.service_e = 0, -1
    if text is not None and text.keep_text is not None:
        m.kinds = text.text_kinds
        m.deferred = set()
        m.keep = text.keep_text
        m.trace_id = trace_id
    _map_walk(m, buf, p, s, e, number, nested, keys, limit, None, service)
    if m.t.puts != len(m.out):  # a key repeated (the map keeps its last entry) or one too long
        last = {}
        m.out = {}
        m.t.size = m.t.cuts = m.t.puts = 0
        if m.kinds is not None:
            m.deferred = set()
        _map_walk(m, buf, p, s, e, number, nested, keys, limit, last, False)
        for key, (vs, ve) in last.items():
            _entry(p, vs, ve, &en)
            if not _ascii(p + en.ks, en.ke - en.ks):
                PyUnicode_AsUTF8AndSize(key, NULL)
            vbuf = _value_at(buf, p, en.first, en.pieces, ve, &at, &to)
            if m.kinds is not None and _defer(m, key, en.ke - en.ks, <Buf>PyBytes_AS_STRING(vbuf), at, to, limit):
                continue
            _put(m.out, key, en.ke - en.ks, _ascii(p + en.ks, en.ke - en.ks), vbuf, at, to, True, limit, &m.t)
    if m.kinds is not None and m.deferred:
        _settle_text(m, buf, p, s, e, keys, limit, text.text_tables)
    m.t.size += len(m.out) * _ENTRY + (_DICT if m.out else _EMPTY_DICT)
    return m


cdef int _settle_text(_Map m, object buf, Buf p, Py_ssize_t s, Py_ssize_t e, _Keys keys, Py_ssize_t limit,
                      tuple tables) except -1:
    """``decode.py``'s ``_settle_text``: drop what ``DocumentText`` drops of the keys left
    unread, and read the rest now (found again in the span's map, rarely needed)."""
    cdef dict out = m.out
    cdef set deferred = m.deferred
    cdef PyObject* found
    cdef tuple table, row
    cdef Entry en
    cdef Py_ssize_t at, to
    for table in tables:
        if PyDict_GetItem(out, (<tuple>table[0])[0]) == NULL:
            continue
        for row in table:
            found = PyDict_GetItem(out, row[0])
            if found != NULL and type(<object>found) is str and len(<object>found):
                if row[1] in deferred:
                    deferred.discard(row[1])
                    m.t.size += len(<str>row[1])  # "" inline, as ``_put`` counts it
                if row[2] in deferred:
                    deferred.discard(row[2])
                    PyDict_DelItem(out, row[2])
            elif (found == NULL or <object>found is None) and PyDict_GetItem(out, row[1]) == NULL \
                    and PyDict_GetItem(out, row[2]) == NULL:
                break
    if not deferred:
        return 0
    last = {}
    cdef _Map positions = _Map()
    positions.out = {}
    _map_walk(positions, buf, p, s, e, 9, False, keys, limit, last, False)
    for key in deferred:
        vs, ve = last[key]
        _entry(p, vs, ve, &en)
        vbuf = _value_at(buf, p, en.first, en.pieces, ve, &at, &to)
        _put(out, key, en.ke - en.ks, True, vbuf, at, to, True, limit, &m.t)
    return 0


# -- spans -----------------------------------------------------------------------------------------

cdef inline bint _zero(Buf p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if p[i]:
            return False
    return True


cdef object _events(object buf, Buf p, Py_ssize_t s, Py_ssize_t e, _Plan plan, Py_ssize_t* size, Py_ssize_t* cuts):
    """``_pb_events``: the wanted events (at most ``MAX_EVENTS``) as a tuple; size and cuts added."""
    cdef Field f, g
    cdef Py_ssize_t pos = s, at, ns, ne, vs, ve, added = 0
    cdef uint64_t time
    cdef Entry en
    cdef Tally t
    kept = []
    while _next(p, &pos, e, &f):
        if f.number != 11 or f.wire != LEN:
            continue
        at, ns, ne, time = f.s, 0, 0, 0
        while _next(p, &at, f.e, &g):
            if g.number == 2 and g.wire == LEN:
                ns, ne = g.s, g.e
            elif g.number == 1 and g.wire == I64:
                time = g.value
        name = _text(p, ns, ne)
        if name not in plan.events:
            continue
        if len(kept) == _MAX_EVENTS:
            cuts[0] += 1
            break
        out = {}
        t.size = t.cuts = t.puts = 0
        at = f.s
        while _next(p, &at, f.e, &g):
            if g.number == 3 and g.wire == LEN:
                _entry(p, g.s, g.e, &en)
                vbuf = _value_at(buf, p, en.first, en.pieces, g.e, &vs, &ve)
                _put(out, _text(p, en.ks, en.ke), en.ke - en.ks, _ascii(p + en.ks, en.ke - en.ks), vbuf, vs, ve, False,
                     plan.limit, &t)
        kept.append(_SpanEvent(name, PyLong_FromUnsignedLongLong(time), out))
        added += _EVENT_BASE + _text_size(name) + t.size + len(out) * _ENTRY + (_DICT if out else _EMPTY_DICT)
        cuts[0] += t.cuts
    if kept:
        added += _TUPLE + 8 * len(kept)
    size[0] += added
    return tuple(kept)


cdef Py_ssize_t _span(object buf, Buf p, Py_ssize_t s, Py_ssize_t e, _Plan plan, object result, list spans,
                      str service, dict resource, Py_ssize_t shared, set counted, Py_ssize_t* truncated) except -1:
    """Append one span to ``spans`` (or reject it for its ids), as ``_from_message`` does: the
    resource's ``shared`` bytes on the first span of each trace (``counted``: those seen). Its
    size in bytes (0 when rejected)."""
    cdef Field f
    cdef Py_ssize_t pos = s, ts = 0, te = 0, ss = 0, se = 0, ps = 0, pe = 0, ns = 0, ne = 0, at
    cdef Py_ssize_t size, cuts = 0, limit = plan.limit
    cdef uint64_t start = 0, end = 0, flags = 0, kind = 0, code = 0
    cdef bint with_events = False
    cdef Field g
    while _next(p, &pos, e, &f):
        if f.wire == LEN:
            if f.number == 1:
                ts, te = f.s, f.e
            elif f.number == 2:
                ss, se = f.s, f.e
            elif f.number == 4:
                ps, pe = f.s, f.e
            elif f.number == 5:
                ns, ne = f.s, f.e
            elif f.number == 11:
                with_events = True
            elif f.number == 15:
                at = f.s
                while _next(p, &at, f.e, &g):
                    if g.number == 3 and g.wire == VARINT:
                        code = g.value
        elif f.wire == I64:
            if f.number == 7:
                start = f.value
            elif f.number == 8:
                end = f.value
        elif f.wire == VARINT:
            if f.number == 6:
                kind = f.value
        elif f.wire == I32:
            if f.number == 16:
                flags = f.value
    if te - ts != 16 or _zero(p + ts, 16):
        result.reject("invalid_trace_id")
        return 0
    if se - ss != 8 or _zero(p + ss, 8):
        result.reject("invalid_span_id")
        return 0
    if pe - ps == 8 and _zero(p + ps, 8):
        parent = b""
    elif pe != ps and pe - ps != 8:
        result.reject("invalid_parent_span_id")
        return 0
    else:
        parent = PyBytes_FromStringAndSize(<const char*>p + ps, pe - ps)
    trace_id = PyBytes_FromStringAndSize(<const char*>p + ts, 16)
    size = _SPAN_BASE
    if trace_id not in counted:
        counted.add(trace_id)
        size += shared
    events = ()
    if plan.with_events and with_events:
        events = _events(buf, p, s, e, plan, &size, &cuts)
    cdef _Map m = _attributes(buf, p, s, e, 9, False, plan.attributes, limit, False, plan, trace_id)
    size += m.t.size
    cuts += m.t.cuts
    if ne - ns <= limit and _ascii(p + ns, ne - ns):
        name = _ascii_text(p, ns, ne)
        size += ne - ns + _STR
    else:
        name = _text(p, ns, ne)
        if len(name) > limit:
            name = name[:limit]
            cuts += 1
        size += _text_size(name)
    truncated[0] += cuts
    spans.append(_Span(
        trace_id,
        PyBytes_FromStringAndSize(<const char*>p + ss, 8),
        parent,
        name,
        PyLong_FromUnsignedLongLong(start),
        PyLong_FromUnsignedLongLong(end),
        PyLong_FromUnsignedLongLong(<uint32_t>flags),
        PyLong_FromLongLong(<int32_t>kind),
        <int32_t>code == 2,
        service,
        m.out,
        events,
        resource,
        size,
    ))
    return size


cdef void _pause() noexcept nogil:
    pass


def decode_protobuf(body, selection, max_bytes=_UNBOUNDED):
    """Decode a binary ``ExportTraceServiceRequest``; ``DecodeError`` if it does not parse,
    ``DecodedTooLargeError`` once its spans take more than ``max_bytes``."""
    if _Span is None:
        _bind()
    if type(body) is not bytes:
        body = bytes(body)
    cdef Buf p = <Buf>PyBytes_AS_STRING(body)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(body)
    cdef int status
    if n >= 65536:  # a big body, decoded in a worker thread: the event loop's thread runs meanwhile
        with nogil:
            status = _validate(p, 0, n, M_REQUEST, 0)
    else:
        status = _validate(p, 0, n, M_REQUEST, 0)
    if status != OK:
        raise DecodeError(_PREFIX + _MESSAGES[status])
    cdef _Plan plan = _plan(selection)
    cdef Py_ssize_t limit = plan.limit, pos = 0, at, inner, truncated = 0, shared, count = 0
    cdef Py_ssize_t held = 0, most = max_bytes
    cdef Field f, g, h
    cdef _Map res
    cdef Any a
    result = _Decoded()
    cdef list spans = result.spans
    while _next(p, &pos, n, &f):
        if f.number != 1 or f.wire != LEN:
            continue
        res = _attributes(body, p, f.s, f.e, 1, True, plan.resource, limit, True)
        service = ""
        if res.service_e >= 0:
            if _entry_value(p, res.service_s, res.service_e, &a) and a.case == 1:
                service = _text(p, a.s, a.e)
                if len(service) > limit:
                    service = service[:limit]
                    truncated += 1
        truncated += res.t.cuts
        shared = res.t.size + _text_size(service)  # once per trace of this resource (decode.py)
        resource = res.out
        counted = set()
        at = f.s
        while _next(p, &at, f.e, &g):
            if g.number != 2 or g.wire != LEN:
                continue
            inner = g.s
            while _next(p, &inner, g.e, &h):
                if h.number == 2 and h.wire == LEN:
                    held += _span(body, p, h.s, h.e, plan, result, spans, service, resource, shared, counted, &truncated)
                    if held > most:
                        del spans[:]  # the error's traceback holds this frame: not what was decoded
                        raise DecodedTooLargeError(most)
                    count += 1
                    if count & 1023 == 0:
                        with nogil:  # a big body: let other threads (the event loop) have their turn
                            _pause()
    result.truncated = truncated
    return result


cdef bint _entry_value(Buf p, Py_ssize_t s, Py_ssize_t e, Any* a) except -1:
    """The ``AnyValue`` of a map entry (its pieces merged); False if the entry has none."""
    cdef Field f
    cdef bint found = False
    a.case = 0
    a.run = 0
    a.value = 0
    while _next(p, &s, e, &f):
        if f.number == 2 and f.wire == LEN:
            _any(p, f.s, f.e, a)
            found = True
    return found
