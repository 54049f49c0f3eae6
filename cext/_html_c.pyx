# cython: language_level=3
# distutils: language = c++
"""Compiled HTML nesting scan. The specification is ``fpstore/fingerprint/_html_py.py``
(:func:`nesting_depth`: its tokenizer regex, tables and tree-builder model); this module must give
the same result for every str, and the tests compare the two on examples, generated tag soup and
real pages.

One pass over the code units of the str (``PyUnicode_READ``: latin-1, UCS-2 or UCS-4, no object
per character). Tag names are lowercased (ASCII letters only, as the twin's ``translate``) and
interned into small integer ids: the names of the twin's tables get fixed ids with their table
memberships as bit flags; any other name gets an id for this call only. The stack, the per-name
positions, the scope classes and the list of active formatting entries are C++ containers. No I/O,
no validation; the scan runs without the GIL (it reads the immutable str in place, which the caller
keeps alive).
"""

cimport cython
from cython.operator cimport dereference as deref
from libc.stdint cimport uint8_t, uint32_t
from libc.string cimport memcmp
from libcpp cimport bool as cbool
from libcpp.algorithm cimport lower_bound, upper_bound
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
from libcpp.vector cimport vector

cdef extern from "Python.h":
    int PyUnicode_KIND(object o)
    void *PyUnicode_DATA(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    uint32_t PyUnicode_READ(int kind, void *data, Py_ssize_t index) nogil


# -- the twin's tables, copied verbatim (the tests check the kernel against it on every name) ------

_VOID = frozenset(
    "area base basefont bgsound br col embed frame hr image img input keygen link meta param source track wbr".split()
)
_RAW = frozenset("iframe noembed noframes script style textarea title xmp".split())
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_FORMATTING = frozenset("a b big code em font i nobr s small strike strong tt u".split())
_SPECIAL = frozenset(
    (
        "address applet area article aside base basefont bgsound blockquote body br button caption center col colgroup "
        "dd details dir div dl dt embed fieldset figcaption figure footer form frame frameset h1 h2 h3 h4 h5 h6 head "
        "header hgroup hr html iframe img input keygen li link listing main marquee menu meta nav noembed noframes "
        "noscript object ol p param plaintext pre script search section select source style summary table tbody td "
        "template textarea tfoot th thead title tr track ul wbr xmp"
    ).split()
)
_CLOSES_P = frozenset(
    (
        "address article aside blockquote center details dialog dir div dl fieldset figcaption figure footer header "
        "hgroup main menu nav ol p search section summary ul h1 h2 h3 h4 h5 h6 pre listing form plaintext xmp"
    ).split()
)
_SCOPED_END = frozenset(
    (
        "address applet article aside blockquote button center details dialog dir div dl dd dt fieldset figcaption "
        "figure footer header hgroup listing main marquee menu nav object ol pre search section summary ul"
    ).split()
)
_TABLE_PARTS = frozenset("caption colgroup tbody td tfoot th thead tr".split())
_BREAKOUT = frozenset(
    (
        "b big blockquote body br center code dd div dl dt em embed h1 h2 h3 h4 h5 h6 head hr i img li listing menu meta "
        "nobr ol p pre ruby s small span strong strike sub sup table tt u ul var"
    ).split()
)
_INTEGRATION = frozenset("foreignobject desc title annotation-xml mi mo mn ms mtext".split())
_NO_RAW = frozenset(("select", "frameset", "template"))
_RUBY_IMPLIED = frozenset("dd dt li optgroup option p rb rp rt rtc".split())
_MARKERS = frozenset("applet caption marquee object td template th".split())
_SCOPE_NAMES = frozenset("applet caption html table td th marquee object template select option optgroup".split())
_CLASS_MEMBERS = (
    _SCOPE_NAMES,
    _SCOPE_NAMES | {"button"},
    _SCOPE_NAMES | {"ol", "ul"},
    frozenset(("html", "table", "template", "select", "option", "optgroup")),
    _SPECIAL,
    _SPECIAL - {"address", "div", "p"},
)
_HAS_CLASSES = _SPECIAL | {"button", "ol", "ul", "option", "optgroup"}
_SIMPLE_START = _CLOSES_P - set(_HEADINGS) - {"plaintext", "xmp"}
_SIMPLE_END = _SCOPED_END - _MARKERS | {"p", "li", "table"} | set(_HEADINGS)
_NOT_PLAIN = _HAS_CLASSES | _VOID | _RAW | _FORMATTING | _NO_RAW | _MARKERS | _TABLE_PARTS | frozenset(
    ("a", "option", "optgroup", "li", "dd", "dt", "button", "table", "plaintext", "html", "head", "body", "p",
     "template", "svg", "math", "rb", "rtc", "rp", "rt")
)

# Scope classes (bits of CLS / MCLS) and kinds of open elements, as in the twin.
cdef enum:
    _DEFAULT = 0
cdef enum:
    _BUTTON = 1
cdef enum:
    _LIST = 2
cdef enum:
    _TABLE = 3
cdef enum:
    _SPEC = 4
cdef enum:
    _SPEC_LI = 5
cdef enum:
    _HTML = 0
cdef enum:
    _FOREIGN = 1
cdef enum:
    _MAYBE = 2
cdef enum:
    FOREIGN_MASK = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 4) | (1 << 5)

# Name flags.
cdef enum:
    F_VOID = 1 << 0
cdef enum:
    F_RAW = 1 << 1
cdef enum:
    F_FORMATTING = 1 << 2
cdef enum:
    F_SPECIAL = 1 << 3
cdef enum:
    F_CLOSES_P = 1 << 4
cdef enum:
    F_SCOPED_END = 1 << 5
cdef enum:
    F_TABLE_PARTS = 1 << 6
cdef enum:
    F_BREAKOUT = 1 << 7
cdef enum:
    F_INTEGRATION = 1 << 8
cdef enum:
    F_NO_RAW = 1 << 9
cdef enum:
    F_RUBY_IMPLIED = 1 << 10
cdef enum:
    F_MARKERS = 1 << 11
cdef enum:
    F_NOT_PLAIN = 1 << 12
cdef enum:
    F_SIMPLE_START = 1 << 13
cdef enum:
    F_SIMPLE_END = 1 << 14
cdef enum:
    F_HEADING = 1 << 15

_FLAG_SETS = (
    (F_VOID, _VOID), (F_RAW, _RAW), (F_FORMATTING, _FORMATTING), (F_SPECIAL, _SPECIAL), (F_CLOSES_P, _CLOSES_P),
    (F_SCOPED_END, _SCOPED_END), (F_TABLE_PARTS, _TABLE_PARTS), (F_BREAKOUT, _BREAKOUT),
    (F_INTEGRATION, _INTEGRATION), (F_NO_RAW, _NO_RAW), (F_RUBY_IMPLIED, _RUBY_IMPLIED), (F_MARKERS, _MARKERS),
    (F_NOT_PLAIN, _NOT_PLAIN), (F_SIMPLE_START, _SIMPLE_START), (F_SIMPLE_END, _SIMPLE_END),
    (F_HEADING, frozenset(_HEADINGS)),
)
_EXTRA = ("ruby", "svg", "math", "tbody", "thead", "tfoot", "caption", "font")
_KNOWN = sorted(frozenset(_EXTRA).union(*(s for _, s in _FLAG_SETS), *_CLASS_MEMBERS))

cdef int NK = len(_KNOWN)
cdef vector[uint32_t] FLAGS
cdef vector[uint8_t] CLS  # the twin's _CLASS_OF, as bits
cdef vector[uint8_t] MCLS  # the twin's _maybe_classes
cdef vector[string] KNOWN_NAMES

cdef enum:
    KTAB_SIZE = 1024  # a power of two, over 4 x the known names: open addressing stays short
    MAX_FAST = 32  # longer names (and non-ASCII ones) take the slow path: a std::string key
cdef int KTAB[KTAB_SIZE]  # hash slot -> known id + 1, 0 when empty


cdef inline uint32_t fnv1a(const char *s, Py_ssize_t n) noexcept nogil:
    cdef uint32_t h = 2166136261u
    cdef Py_ssize_t j
    for j in range(n):
        h = (h ^ <uint8_t>s[j]) * 16777619u
    return h


cdef void _ktab_insert(bytes name, int i):
    cdef uint32_t h = fnv1a(name, len(name)) & (KTAB_SIZE - 1)
    while KTAB[h]:
        h = (h + 1) & (KTAB_SIZE - 1)
    KTAB[h] = i + 1


cdef inline int known_id(const char *s, Py_ssize_t n) noexcept nogil:
    """The id of the known name s[:n] (ASCII, lowercase), or -1."""
    cdef uint32_t h = fnv1a(s, n) & (KTAB_SIZE - 1)
    cdef int k
    while KTAB[h]:
        k = KTAB[h] - 1
        if <Py_ssize_t>KNOWN_NAMES[k].size() == n and memcmp(KNOWN_NAMES[k].data(), s, n) == 0:
            return k
        h = (h + 1) & (KTAB_SIZE - 1)
    return -1


cdef void _init_tables():
    cdef uint32_t f
    cdef uint8_t m
    for i, name in enumerate(_KNOWN):
        f = 0
        for bit, members in _FLAG_SETS:
            if name in members:
                f |= bit
        m = 0
        if name in _HAS_CLASSES:
            for c, members in enumerate(_CLASS_MEMBERS):
                if name in members:
                    m |= 1 << c
        FLAGS.push_back(f)
        CLS.push_back(m)
        MCLS.push_back(m | (FOREIGN_MASK if name in _INTEGRATION else 0))
        KNOWN_NAMES.push_back(name.encode("ascii"))
        _ktab_insert(name.encode("ascii"), i)

_init_tables()

cdef int _id(str name):
    return _KNOWN.index(name)

cdef int N_HTML = _id("html"), N_HEAD = _id("head"), N_BODY = _id("body"), N_P = _id("p"), N_BR = _id("br")
cdef int N_LI = _id("li"), N_DD = _id("dd"), N_DT = _id("dt"), N_A = _id("a"), N_HR = _id("hr")
cdef int N_OPTION = _id("option"), N_OPTGROUP = _id("optgroup"), N_SELECT = _id("select"), N_BUTTON = _id("button")
cdef int N_TABLE = _id("table"), N_TEMPLATE = _id("template"), N_SVG = _id("svg"), N_MATH = _id("math")
cdef int N_TD = _id("td"), N_TH = _id("th"), N_TR = _id("tr"), N_TBODY = _id("tbody"), N_THEAD = _id("thead")
cdef int N_TFOOT = _id("tfoot"), N_CAPTION = _id("caption"), N_RUBY = _id("ruby"), N_FONT = _id("font")
cdef int N_RB = _id("rb"), N_RTC = _id("rtc"), N_RP = _id("rp"), N_RT = _id("rt")
cdef int N_H[6]
for _i in range(6):
    N_H[_i] = _id(_HEADINGS[_i])
del _i


cdef inline bint is_ws(uint32_t c) noexcept nogil:
    return c == 32 or c == 9 or c == 10 or c == 12 or c == 13


cdef inline uint32_t ascii_lower(uint32_t c) noexcept nogil:
    return c + 32 if 65 <= c <= 90 else c


cdef inline bint is_alpha(uint32_t c) noexcept nogil:
    return 65 <= c <= 90 or 97 <= c <= 122


cdef struct Entry:
    int key  # its (name, attributes) key, an index into _Scan.noah
    long after  # the marker it came after


@cython.final
cdef class _Scan:
    """The state of one scan: the twin's local variables."""

    cdef int kind
    cdef void *data
    cdef Py_ssize_t n
    cdef long limit
    cdef vector[int] names
    cdef vector[long] marks
    cdef vector[vector[long]] where
    cdef vector[vector[long]] classes
    cdef vector[long] foreign
    cdef vector[long] maybe
    cdef unordered_map[long, long] at
    cdef unordered_map[long, Entry] live
    cdef vector[vector[long]] latest
    cdef unordered_map[string, int] noah_ids
    cdef vector[vector[long]] noah
    cdef vector[long] markers
    cdef unordered_map[string, int] unknown
    cdef string key
    cdef bint head_once
    cdef long off, best, serial, no_raw

    def __cinit__(self, str html, long limit):
        self.kind = PyUnicode_KIND(html)
        self.data = PyUnicode_DATA(html)
        self.n = PyUnicode_GET_LENGTH(html)
        self.limit = limit
        self.where.resize(NK)
        self.latest.resize(NK)
        self.classes.resize(6)
        self.markers.push_back(0)
        self.head_once = False
        self.off = self.best = self.serial = self.no_raw = 0

    cdef inline uint32_t at_(self, Py_ssize_t i) noexcept nogil:
        return PyUnicode_READ(self.kind, self.data, i)

    cdef inline uint32_t flags(self, int name) noexcept nogil:
        return FLAGS[name] if name < NK else 0

    cdef int add_units(self, Py_ssize_t a, Py_ssize_t b, bint lower) except -1 nogil:
        """Append code units [a, b) to self.key (ASCII-lowercased when ``lower``): one byte for
        ASCII, else 0x80 and four bytes, an injective encoding."""
        cdef Py_ssize_t j
        cdef uint32_t c
        for j in range(a, b):
            c = self.at_(j)
            if lower:
                c = ascii_lower(c)
            if c < 128:
                self.key.push_back(<char>c)
            else:
                self.key.push_back(<char>0x80)
                self.key.push_back(<char>(c & 0xFF))
                self.key.push_back(<char>((c >> 8) & 0xFF))
                self.key.push_back(<char>((c >> 16) & 0xFF))
                self.key.push_back(<char>((c >> 24) & 0xFF))
        return 0

    cdef int intern(self, Py_ssize_t a, Py_ssize_t b) except -1 nogil:
        """The id of the tag name in code units [a, b), ASCII-lowercased."""
        cdef char buf[MAX_FAST]
        cdef Py_ssize_t j, n = b - a
        cdef uint32_t c
        cdef int got
        cdef unordered_map[string, int].iterator it
        if n <= MAX_FAST:  # the known names are short and ASCII: look them up without a string
            for j in range(n):
                c = self.at_(a + j)
                if c >= 128:
                    break
                buf[j] = <char>ascii_lower(c)
            else:
                got = known_id(buf, n)
                if got >= 0:
                    return got
        self.key.clear()
        self.add_units(a, b, True)
        it = self.unknown.find(self.key)
        if it != self.unknown.end():
            return deref(it).second
        cdef int new = <int>self.where.size()
        self.unknown[self.key] = new
        self.where.push_back(vector[long]())
        self.latest.push_back(vector[long]())
        return new

    cdef bint push(self, int name, bint has_attrs, Py_ssize_t a0, Py_ssize_t a1, int kind) except -1 nogil:
        """Open an element of ``kind`` (a formatting element with its entry when ``has_attrs``);
        True when the count went over the limit."""
        cdef long i = <long>self.names.size()
        cdef uint32_t f = self.flags(name)
        cdef uint8_t m
        cdef int c, k
        cdef long old
        cdef Py_ssize_t j
        cdef unordered_map[string, int].iterator it
        self.names.push_back(name)
        self.where[name].push_back(i)
        self.serial += 1
        if kind != _HTML:
            self.foreign.push_back(i)
        if kind == _MAYBE:
            self.maybe.push_back(i)
        if kind == _FOREIGN:
            if f & F_INTEGRATION:
                for c in range(6):
                    if FOREIGN_MASK & (1 << c):
                        self.classes[c].push_back(i)
        else:
            m = 0
            if name < NK:
                m = MCLS[name] if kind == _MAYBE else CLS[name]
            for c in range(6):
                if m & (1 << c):
                    self.classes[c].push_back(i)
            if f & F_NO_RAW:
                self.no_raw += 1
            if f & F_MARKERS:
                self.markers.push_back(self.serial)
        if has_attrs and kind != _FOREIGN and f & F_FORMATTING:
            self.marks.push_back(self.serial)
            self.at[self.serial] = i
            self.key.clear()
            self.key.push_back(<char>name)  # formatting names are known: id < 256
            self.add_units(a0, a1, False)
            it = self.noah_ids.find(self.key)
            if it == self.noah_ids.end():
                k = <int>self.noah.size()
                self.noah_ids[self.key] = k
                self.noah.push_back(vector[long]())
            else:
                k = deref(it).second
            self.live[self.serial] = Entry(k, self.markers.back())
            self.latest[name].push_back(self.serial)
            self.noah[k].push_back(self.serial)
            if self.noah[k].size() > 3:  # Noah's Ark: at most three identical entries
                old = self.noah[k][0]
                self.noah[k].erase(self.noah[k].begin())
                self.live.erase(old)
                if self.at.count(old) == 0:
                    self.off -= 1
        else:
            self.marks.push_back(0)
        if i + 1 + self.off > self.best:
            self.best = i + 1 + self.off
        return self.best > self.limit

    cdef int pop_to(self, long i) except -1 nogil:
        """Close the element at position i and every element above it."""
        cdef int name, kind, c
        cdef long mark, n
        cdef uint32_t f
        cdef uint8_t m
        while <long>self.names.size() > i:
            name = self.names.back()
            self.names.pop_back()
            mark = self.marks.back()
            self.marks.pop_back()
            self.where[name].pop_back()
            n = <long>self.names.size()
            kind = _HTML
            if self.foreign.size() > 0 and self.foreign.back() == n:
                self.foreign.pop_back()
                kind = _FOREIGN
                if self.maybe.size() > 0 and self.maybe.back() == n:
                    self.maybe.pop_back()
                    kind = _MAYBE
            f = self.flags(name)
            if kind == _FOREIGN:
                if f & F_INTEGRATION:
                    for c in range(6):
                        if FOREIGN_MASK & (1 << c):
                            self.classes[c].pop_back()
            elif f & F_NOT_PLAIN or kind == _MAYBE:
                m = 0
                if name < NK:
                    m = MCLS[name] if kind == _MAYBE else CLS[name]
                for c in range(6):
                    if m & (1 << c):
                        self.classes[c].pop_back()
                if f & F_NO_RAW:
                    self.no_raw -= 1
                if f & F_MARKERS:
                    self.markers.pop_back()
                if mark:
                    self.at.erase(mark)
                    self.off += <long>self.live.count(mark)  # its entry stays: it may be opened again
        return 0

    cdef inline long last(self, int name) noexcept nogil:
        if self.where[name].size():
            return self.where[name].back()
        return -1

    cdef inline long top(self, int c) noexcept nogil:
        if self.classes[c].size():
            return self.classes[c].back()
        return -1

    cdef int close_p(self) except -1 nogil:
        cdef long i = self.last(N_P)
        if i > self.top(_BUTTON):
            self.pop_to(i)
        return 0

    cdef int drop_entry(self, long serial) except -1 nogil:
        cdef Entry e = self.live[serial]
        self.live.erase(serial)
        cdef vector[long] *same = &self.noah[e.key]
        cdef size_t j
        for j in range(same.size()):
            if same[0][j] == serial:
                same.erase(same.begin() + j)
                break
        if self.at.count(serial) == 0:
            self.off -= 1
        return 0

    cdef long latest_entry(self, int name) except -1 nogil:
        cdef vector[long] *entries = &self.latest[name]
        while entries.size() > 0 and self.live.count(entries.back()) == 0:
            entries.pop_back()
        return entries.back() if entries.size() else 0

    cdef inline long at_get(self, long serial) noexcept nogil:
        it = self.at.find(serial)
        return deref(it).second if it != self.at.end() else -1

    cdef bint is_foreign(self, long i) noexcept nogil:
        cdef vector[long].iterator it = lower_bound(self.foreign.begin(), self.foreign.end(), i)
        return it != self.foreign.end() and deref(it) == i

    cdef int leave_foreign(self) except -1 nogil:
        """A tag that leaves foreign content: close the foreign elements on top (up to an HTML
        element or an integration point)."""
        cdef long i = <long>self.names.size()
        cdef long j = <long>self.foreign.size() - 1
        while (j >= 0 and self.foreign[j] == i - 1 and not (self.flags(self.names[i - 1]) & F_INTEGRATION)
               and not (self.maybe.size() > 0 and self.maybe.back() == i - 1)):
            i -= 1
            j -= 1
        self.pop_to(i)
        return 0

    cdef bint font_breaks(self, Py_ssize_t a0, Py_ssize_t a1) noexcept nogil:
        """The twin's _FONT_BREAKS.search(attrs): color, face or size as an attribute name."""
        cdef Py_ssize_t j, e, k, w
        cdef const char *word
        cdef const char *words[3]
        cdef uint32_t c
        words[0] = b"color"
        words[1] = b"face"
        words[2] = b"size"
        for j in range(a0, a1):
            if j > a0:
                c = self.at_(j - 1)
                if not (is_ws(c) or c == 47):
                    continue
            for w in range(3):
                word = words[w]
                e = j
                k = 0
                while word[k] and e < a1 and ascii_lower(self.at_(e)) == <uint32_t>word[k]:
                    e += 1
                    k += 1
                if word[k] == 0:
                    if e == a1:
                        return True
                    c = self.at_(e)
                    if is_ws(c) or c == 47 or c == 61:
                        return True
        return False

    cdef Py_ssize_t raw_end(self, int name, Py_ssize_t pos) noexcept nogil:
        """Where the content of raw-text element ``name`` ends (its end tag, ASCII
        case-insensitive, before a space, '/' or '>'), or -1."""
        cdef const string *s = &KNOWN_NAMES[name]
        cdef Py_ssize_t L = <Py_ssize_t>s.size(), k, j
        cdef uint32_t c
        for k in range(pos, self.n - L - 2):
            if self.at_(k) != 60 or self.at_(k + 1) != 47:
                continue
            j = 0
            while j < L and ascii_lower(self.at_(k + 2 + j)) == <uint32_t><uint8_t>s[0][j]:
                j += 1
            if j == L:
                c = self.at_(k + 2 + L)
                if is_ws(c) or c == 47 or c == 62:
                    return k
        return -1

    cdef long run(self) except -2 nogil:
        cdef Py_ssize_t n = self.n, pos = 0, i, j, k, ns, ne, a0, a1, end
        cdef uint32_t c, c1
        cdef bint slash, top_foreign
        cdef int eot, name, kind, keep
        cdef uint32_t f
        cdef uint8_t m
        cdef long li, t_i, cell, row, entry, above
        self.push(N_HTML, False, 0, 0, _HTML)
        self.push(N_BODY, False, 0, 0, _HTML)
        while True:
            # -- the next token (the twin's TOKEN.search) --
            i = pos
            while True:
                while i < n and self.at_(i) != 60:  # '<'
                    i += 1
                if i >= n:
                    return self.best
                c1 = self.at_(i + 1) if i + 1 < n else 0
                if c1 == 33 or c1 == 63 or c1 == 47 or is_alpha(c1):
                    break
                i += 1
            if c1 == 33 and i + 3 < n and self.at_(i + 2) == 45 and self.at_(i + 3) == 45:  # a comment
                j = i + 4
                if j < n and self.at_(j) == 62:
                    pos = j + 1
                elif j + 1 < n and self.at_(j) == 45 and self.at_(j + 1) == 62:
                    pos = j + 2
                else:
                    pos = n
                    k = j
                    while k + 2 < n:
                        if self.at_(k) == 45 and self.at_(k + 1) == 45:
                            c = self.at_(k + 2)
                            if c == 62:
                                pos = k + 3
                                break
                            if c == 33 and k + 3 < n and self.at_(k + 3) == 62:
                                pos = k + 4
                                break
                        k += 1
                continue
            if c1 == 33 or c1 == 63 or (c1 == 47 and not (i + 2 < n and is_alpha(self.at_(i + 2)))):
                j = i + 2
                while j < n and self.at_(j) != 62:
                    j += 1
                pos = j + 1 if j < n else n
                continue
            # a start or end tag
            slash = c1 == 47
            ns = i + 2 if slash else i + 1
            j = ns + 1
            while j < n:
                c = self.at_(j)
                if is_ws(c) or c == 47 or c == 62:
                    break
                j += 1
            ne = a0 = j
            while j < n:
                c = self.at_(j)
                if is_ws(c):
                    j += 1
                    continue
                if c == 47:
                    if j + 1 < n and self.at_(j + 1) == 62:
                        break
                    j += 1
                    continue
                if c == 62:
                    break
                j += 1  # an attribute name
                while j < n:
                    c = self.at_(j)
                    if is_ws(c) or c == 47 or c == 61 or c == 62:
                        break
                    j += 1
                k = j
                while k < n and is_ws(self.at_(k)):
                    k += 1
                if k < n and self.at_(k) == 61:  # '=' and a value
                    k += 1
                    while k < n and is_ws(self.at_(k)):
                        k += 1
                    if k < n and (self.at_(k) == 34 or self.at_(k) == 39):
                        c = self.at_(k)
                        k += 1
                        while k < n and self.at_(k) != c:
                            k += 1
                        if k < n:
                            k += 1
                    else:
                        while k < n:
                            c = self.at_(k)
                            if is_ws(c) or c == 62:
                                break
                            k += 1
                    j = k
            a1 = j
            if j >= n:  # the input ends inside the tag: the tokenizer drops it, and stops
                return self.best
            if self.at_(j) == 62:
                eot = 1
                pos = j + 1
            else:
                eot = 2
                pos = j + 2
            # -- the tree builder model --
            name = self.intern(ns, ne)
            f = self.flags(name)
            top_foreign = self.foreign.size() > 0 and self.foreign.back() == <long>self.names.size() - 1
            if slash:  # an end tag
                if not top_foreign and self.names.back() == name:  # it closes the current node
                    if not (f & F_NOT_PLAIN):
                        self.names.pop_back()
                        self.marks.pop_back()
                        self.where[name].pop_back()
                        continue
                    if f & F_SIMPLE_END:
                        self.names.pop_back()
                        self.marks.pop_back()
                        self.where[name].pop_back()
                        m = CLS[name]
                        for k in range(6):
                            if m & (1 << k):
                                self.classes[k].pop_back()
                        continue
                if top_foreign:
                    if name == N_P or name == N_BR:
                        self.leave_foreign()
                    else:
                        li = self.last(name)
                        if li < 0:
                            continue
                        if (<long>(self.foreign.end() - lower_bound(self.foreign.begin(), self.foreign.end(), li))
                                == <long>self.names.size() - li
                                and not (self.maybe.size() > 0 and self.maybe.back() >= li)):
                            self.pop_to(li)
                            continue
                        if self.maybe.size() > 0 and self.maybe.back() == <long>self.names.size() - 1:
                            continue
                if self.foreign.size() > 0 and self.is_foreign(self.last(name)):
                    continue  # the HTML rules close HTML elements only
                if f & F_FORMATTING:
                    entry = self.latest_entry(name)
                    if entry:
                        li = self.at_get(entry)
                        if li > self.top(_SPEC):
                            self.drop_entry(entry)
                            self.pop_to(li)
                        continue
                li = self.last(name)
                if li < 0:
                    continue
                if name == N_P:
                    if li > self.top(_BUTTON):
                        self.pop_to(li)
                elif f & F_SCOPED_END:
                    if li >= self.top(_DEFAULT):
                        self.pop_to(li)
                elif name == N_LI:
                    if li > self.top(_LIST):
                        self.pop_to(li)
                elif f & F_HEADING:
                    li = -1
                    for k in range(6):
                        if self.last(N_H[k]) > li:
                            li = self.last(N_H[k])
                    if li > self.top(_DEFAULT):
                        self.pop_to(li)
                elif f & F_TABLE_PARTS:
                    t_i = self.top(_TABLE)
                    if 0 <= t_i < li and self.names[t_i] == N_TABLE:
                        self.pop_to(li)
                elif name == N_TABLE:
                    if li == self.top(_TABLE):
                        self.pop_to(li)
                elif name == N_TEMPLATE:
                    self.pop_to(li)
                elif name == N_SELECT:  # closes it when only options are open above it
                    above = <long>self.names.size() - 1 - li
                    above -= <long>(self.where[N_OPTION].end()
                                    - upper_bound(self.where[N_OPTION].begin(), self.where[N_OPTION].end(), li))
                    above -= <long>(self.where[N_OPTGROUP].end()
                                    - upper_bound(self.where[N_OPTGROUP].begin(), self.where[N_OPTGROUP].end(), li))
                    if above == 0:
                        self.pop_to(li)
                elif f & F_SPECIAL:
                    if li == <long>self.names.size() - 1 and name != N_BODY and name != N_HTML:
                        self.pop_to(li)
                elif li > self.top(_SPEC):
                    self.pop_to(li)
                continue
            # a start tag
            if top_foreign:
                if not (f & F_BREAKOUT or name == N_FONT and self.font_breaks(a0, a1)):
                    if name == N_SVG or name == N_MATH:
                        kind = _FOREIGN
                    elif (self.flags(self.names.back()) & F_INTEGRATION
                          or self.maybe.size() > 0 and self.maybe.back() == <long>self.names.size() - 1):
                        kind = _MAYBE
                    else:
                        kind = _FOREIGN
                    if (eot != 2 or kind == _MAYBE) and self.push(name, kind == _MAYBE, a0, a1, kind):
                        return self.best
                    continue
                self.leave_foreign()
            if not (f & F_NOT_PLAIN) or f & F_SIMPLE_START:  # the common cases
                li = <long>self.names.size()
                if f & F_SIMPLE_START:
                    if self.where[N_P].size() > 0 and self.where[N_P].back() > self.top(_BUTTON):
                        self.pop_to(self.where[N_P].back())
                        li = <long>self.names.size()
                    m = CLS[name]
                    for k in range(6):
                        if m & (1 << k):
                            self.classes[k].push_back(li)
                self.where[name].push_back(li)
                self.names.push_back(name)
                self.marks.push_back(0)
                if li + 1 + self.off > self.best:
                    self.best = li + 1 + self.off
                    if self.best > self.limit:
                        return self.best
                continue
            if f & F_VOID:
                if name == N_HR:
                    self.close_p()
                continue
            if name == N_HTML or name == N_BODY or (name == N_HEAD and self.head_once):
                continue
            if name == N_HEAD:
                self.head_once = True
            elif name == N_SVG or name == N_MATH:
                if eot != 2 and self.push(name, False, 0, 0, _FOREIGN):
                    return self.best
                continue
            elif f & F_CLOSES_P:
                self.close_p()
                if f & F_HEADING and self.flags(self.names.back()) & F_HEADING:
                    self.pop_to(<long>self.names.size() - 1)
            elif name == N_LI or name == N_DD or name == N_DT:
                if name == N_LI:
                    li = self.last(N_LI)
                else:
                    li = max(self.last(N_DD), self.last(N_DT))
                if li >= 0 and li == self.top(_SPEC_LI):
                    self.pop_to(li)
                self.close_p()
            elif name == N_A:
                # An "a" entry after the last marker is closed (or at least dropped) by a new one.
                entry = self.latest_entry(N_A)
                if entry and self.live[entry].after == self.markers.back():
                    li = self.at_get(entry)
                    self.drop_entry(entry)
                    if li > self.top(_SPEC):
                        self.pop_to(li)
            elif name == N_OPTION or name == N_OPTGROUP:
                if self.names.back() == N_OPTION:
                    self.pop_to(<long>self.names.size() - 1)
            elif name == N_RB or name == N_RTC or name == N_RP or name == N_RT:
                if self.last(N_RUBY) > self.top(_DEFAULT):  # a ruby in scope: close the implied end tags
                    keep = N_RTC if name == N_RP or name == N_RT else -1
                    li = <long>self.names.size()
                    while self.flags(self.names[li - 1]) & F_RUBY_IMPLIED and self.names[li - 1] != keep:
                        li -= 1
                    self.pop_to(li)
            elif name == N_BUTTON:
                li = self.last(N_BUTTON)
                if li > self.top(_DEFAULT):
                    self.pop_to(li)
            elif name == N_TD or name == N_TH or name == N_TR:
                t_i = self.top(_TABLE)
                if t_i >= 0 and self.names[t_i] == N_TABLE:  # in a table: close the open cell, or row
                    cell = max(self.last(N_TD), self.last(N_TH))
                    row = self.last(N_TR)
                    if name == N_TR and row > t_i:
                        self.pop_to(row)
                    elif cell > t_i and cell > row:
                        self.pop_to(cell)
                    elif name != N_TR and row > t_i:
                        self.pop_to(row + 1)
                    if name == N_TR or self.last(N_TR) < t_i:  # the row group and row the builder inserts
                        if max(self.last(N_TBODY), max(self.last(N_THEAD), self.last(N_TFOOT))) < t_i:
                            self.pop_to(t_i + 1)
                            if self.push(N_TBODY, False, 0, 0, _HTML):
                                return self.best
                        if name != N_TR and self.push(N_TR, False, 0, 0, _HTML):
                            return self.best
            elif f & F_TABLE_PARTS or name == N_TABLE:
                t_i = self.top(_TABLE)
                if t_i >= 0 and self.names[t_i] == N_TABLE:
                    if name == N_TABLE:
                        if max(self.last(N_TD), max(self.last(N_TH), self.last(N_CAPTION))) < t_i:
                            self.pop_to(t_i)
                    elif <long>self.names.size() > t_i + 1:
                        self.pop_to(t_i + 1)
            if self.push(name, True, a0, a1, _HTML):
                return self.best
            if f & F_RAW and not self.no_raw:
                end = self.raw_end(name, pos)
                self.pop_to(<long>self.names.size() - 1)
                if end < 0:
                    return self.best
                pos = end


def nesting_depth(str html, long limit):
    """How deep the tags of ``html`` nest, as the twin ``fpstore.fingerprint._html_py.nesting_depth``
    counts: stops once the count exceeds ``limit`` and returns it then."""
    cdef _Scan scan = _Scan(html, limit)
    cdef long got
    with nogil:  # the str stays referenced (by the caller) and unchanged: it is read in place
        got = scan.run()
    return got
