"""Pure-Python twin of ``cext/_html_c.pyx``: the specification of :func:`nesting_depth`.

The compiled kernel ``fpstore._html_c`` has the same function with the same results on every
input; tests compare the two on the project's examples, generated tag soup and real pages.
:mod:`fpstore.fingerprint.html` calls whichever ``fpstore._backend`` selects, and uses the tokenizer
(:data:`TOKEN`, :func:`raw_end`) here for its flat text as well. Why the scan exists and what it must
never do (count less than the tree builder builds) is told in ``fpstore/fingerprint/html.py`` (step 5).
"""

from __future__ import annotations

import bisect
import re

__all__ = ["ASCII_LOWER", "RAW", "TOKEN", "nesting_depth", "raw_end"]

# One token at a '<': a comment (ends as the tokenizer ends it), a bogus comment, doctype or CDATA
# (to the first '>'), '</' not before a letter, or a start or end tag with its attributes read as
# the tokenizer reads them (a quote opens a value only after '='; an unclosed one runs to the end).
# Possessive and atomic: one parse, linear time.
TOKEN = re.compile(
    r"""<(?:
      !--(?:>|->|.*?--!?>|.*\Z)
    | [!?][^>]*+>?
    | /(?![A-Za-z])[^>]*+>?
    | (/?)([A-Za-z][^\t\n\f\r />]*+)
      ((?:(?:[\t\n\f\r ]|/(?!>))++
        | [^\t\n\f\r />][^\t\n\f\r /=>]*+
          (?>[\t\n\f\r ]*+=[\t\n\f\r ]*+(?>"[^"]*+(?:"|\Z)|'[^']*+(?:'|\Z)|[^\t\n\f\r >]*+))?
      )*+)
      (/?>)?
    )""",
    re.S | re.X,
)
_RAW_END: dict[str, re.Pattern[str]] = {}
ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

_VOID = frozenset("area base basefont bgsound br col embed frame hr image img input keygen link meta param source track wbr".split())
RAW = frozenset("iframe noembed noframes script style textarea title xmp".split())
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
# End tags that pop to the element when it is in (default) scope.
_SCOPED_END = frozenset(
    (
        "address applet article aside blockquote button center details dialog dir div dl dd dt fieldset figcaption "
        "figure footer header hgroup listing main marquee menu nav object ol pre search section summary ul"
    ).split()
)
_TABLE_PARTS = frozenset("caption colgroup tbody td tfoot th thead tr".split())
# Foreign content (svg, math): start tags that leave it (and end tags br, p; font only with a
# color, face or size attribute), and its elements whose content is HTML again.
_BREAKOUT = frozenset(
    (
        "b big blockquote body br center code dd div dl dt em embed h1 h2 h3 h4 h5 h6 head hr i img li listing menu meta "
        "nobr ol p pre ruby s small span strong strike sub sup table tt u ul var"
    ).split()
)
_INTEGRATION = frozenset("foreignobject desc title annotation-xml mi mo mn ms mtext".split())
_FONT_BREAKS = re.compile(r"(?:^|[\t\n\f\r /])(?:color|face|size)(?:[\t\n\f\r /=]|$)", re.I | re.A)
# Inside these, a raw-text element may be ignored (left to the tokenizer as tags) rather than read raw.
_NO_RAW = frozenset(("select", "frameset", "template"))
_RUBY_IMPLIED = frozenset("dd dt li optgroup option p rb rp rt rtc".split())  # "generate implied end tags"
_MARKERS = frozenset("applet caption marquee object td template th".split())

# Classes of elements whose positions on the stack are kept, for "in scope" checks in O(1).
_DEFAULT, _BUTTON, _LIST, _TABLE, _SPEC, _SPEC_LI = range(6)
# select, option and optgroup count as boundaries of every scope: parsers that follow the 2025
# "customizable select" change and those that do not close different things inside them.
_SCOPE_NAMES = frozenset("applet caption html table td th marquee object template select option optgroup".split())
_CLASS_OF: dict[str, tuple[int, ...]] = {}
for _name in _SPECIAL | {"button", "ol", "ul", "option", "optgroup"}:
    _CLASS_OF[_name] = tuple(
        c
        for c, members in (
            (_DEFAULT, _SCOPE_NAMES),
            (_BUTTON, _SCOPE_NAMES | {"button"}),
            (_LIST, _SCOPE_NAMES | {"ol", "ul"}),
            (_TABLE, frozenset(("html", "table", "template", "select", "option", "optgroup"))),
            (_SPEC, _SPECIAL),
            (_SPEC_LI, _SPECIAL - {"address", "div", "p"}),
        )
        if _name in members
    )
del _name
#: Foreign elements in the scope lists and the special category: the integration points.
_FOREIGN_CLASSES = (_DEFAULT, _BUTTON, _LIST, _SPEC, _SPEC_LI)
# Kinds of open elements. _MAYBE: an element opened in an integration point (or in such an
# element) that is not an HTML breakout tag: HTML if the integration point is one (foreignObject,
# mi, ...), else foreign (annotation-xml without an HTML encoding). It gets the bookkeeping of both:
# the boundaries and entries of the HTML element, and "/>" does not close it.
_HTML, _FOREIGN, _MAYBE = range(3)


_MAYBE_CLASSES: dict[str, tuple[int, ...]] = {}


def _maybe_classes(name: str) -> tuple[int, ...]:
    got = _MAYBE_CLASSES.get(name)
    if got is None:
        both = set(_CLASS_OF.get(name, ())) | (set(_FOREIGN_CLASSES) if name in _INTEGRATION else set())
        got = _MAYBE_CLASSES[name] = tuple(sorted(both))
    return got


#: Block elements whose start tag only closes a p, and whose end tag, when they are the current
#: node, only closes them: the fast paths of the scan.
_SIMPLE_START = _CLOSES_P - set(_HEADINGS) - {"plaintext", "xmp"}
_SIMPLE_END = _SCOPED_END - _MARKERS | {"p", "li", "table"} | set(_HEADINGS)
#: Names with a rule of their own; every other name is pushed and popped in the common way.
_NOT_PLAIN = (
    frozenset(_CLASS_OF)
    | _VOID
    | RAW
    | _FORMATTING
    | _NO_RAW
    | _MARKERS
    | _TABLE_PARTS
    | frozenset(
        (
            "a",
            "option",
            "optgroup",
            "li",
            "dd",
            "dt",
            "button",
            "table",
            "plaintext",
            "html",
            "head",
            "body",
            "p",
            "template",
            "svg",
            "math",
            "rb",
            "rtc",
            "rp",
            "rt",
        )
    )
)


def nesting_depth(html: str, limit: int) -> int:
    """How deep the tags of ``html`` nest: the most elements the HTML5 tree builder can have open
    at once (``html`` and ``body`` included, void elements not), plus the formatting elements it
    may open again ("reconstruct the active formatting elements").

    Counted by one linear scan that reads tags, comments and raw text as the HTML tokenizer does and
    models the tree builder's implied end tags, scope rules and foreign content, always closing no
    more than it does: it never counts less than the tree lexbor builds, and on ordinary pages it
    counts that tree's depth (within a level or two). Stops as soon as the count exceeds ``limit``
    and returns it then (a number above ``limit``).
    """
    names: list[str] = []  # the stack of open elements, by name
    marks: list[int] = []  # per open element: its serial if it is a formatting element, else 0
    where: dict[str, list[int]] = {}  # name -> its positions on the stack
    classes: list[list[int]] = [[] for _ in range(6)]  # class -> positions of its members
    foreign: list[int] = []  # positions of the foreign (svg, math) elements, maybe-HTML ones included
    maybe: list[int] = []  # positions of the elements that may be HTML or foreign (see _MAYBE)
    at: dict[int, int] = {}  # serial -> position of a formatting element on the stack
    live: dict[int, tuple[str, str]] = {}  # serial -> (name, attributes) of active formatting entries
    after: dict[int, int] = {}  # serial of an entry -> the marker it came after
    latest: dict[str, list[int]] = {}  # name -> serials of its entries (some may be dead), oldest first
    noah: dict[tuple[str, str], list[int]] = {}  # (name, attributes) -> live serials, oldest first
    # Elements that put a marker in the list of active formatting elements (every one that may:
    # more markers only keep more entries), by serial; 0 stands for the start of the list.
    markers: list[int] = [0]
    once = {"html", "body"}  # the builder opens these once, whether or not the page has their tags
    off = best = serial = no_raw = 0  # off: entries whose element is no longer open

    def push(name: str, attrs: str | None, kind: int = _HTML) -> bool:
        """Open an element of ``kind`` (a formatting element with its entry when ``attrs`` is
        given); True when the count went over the limit."""
        nonlocal off, best, serial, no_raw
        i = len(names)
        names.append(name)
        where.setdefault(name, []).append(i)
        serial += 1
        if kind != _HTML:
            foreign.append(i)
        if kind == _MAYBE:
            maybe.append(i)
        if kind == _FOREIGN:
            for c in _FOREIGN_CLASSES if name in _INTEGRATION else ():
                classes[c].append(i)
        else:
            for c in _maybe_classes(name) if kind == _MAYBE else _CLASS_OF.get(name, ()):
                classes[c].append(i)
            if name in _NO_RAW:
                no_raw += 1
            if name in _MARKERS:
                markers.append(serial)
        if attrs is not None and kind != _FOREIGN and name in _FORMATTING:
            marks.append(serial)
            at[serial] = i
            key = (name, attrs)
            live[serial] = key
            after[serial] = markers[-1]
            latest.setdefault(name, []).append(serial)
            same = noah.setdefault(key, [])
            same.append(serial)
            if len(same) > 3:  # Noah's Ark: at most three identical entries
                old = same.pop(0)
                del live[old], after[old]
                if old not in at:
                    off -= 1
        else:
            marks.append(0)
        if i + 1 + off > best:
            best = i + 1 + off
        return best > limit

    def pop_to(i: int) -> None:
        """Close the element at position i and every element above it."""
        nonlocal off, no_raw
        while len(names) > i:
            name = names.pop()
            mark = marks.pop()
            where[name].pop()
            kind = _HTML
            if foreign and foreign[-1] == len(names):
                foreign.pop()
                kind = _FOREIGN
                if maybe and maybe[-1] == len(names):
                    maybe.pop()
                    kind = _MAYBE
            if kind == _FOREIGN:
                for c in _FOREIGN_CLASSES if name in _INTEGRATION else ():
                    classes[c].pop()
            elif name in _NOT_PLAIN or kind == _MAYBE:
                for c in _maybe_classes(name) if kind == _MAYBE else _CLASS_OF.get(name, ()):
                    classes[c].pop()
                if name in _NO_RAW:
                    no_raw -= 1
                if name in _MARKERS:
                    markers.pop()
                if mark:
                    del at[mark]
                    off += mark in live  # its entry stays: the builder may open it again

    def last(name: str) -> int:
        w = where.get(name)
        return w[-1] if w else -1

    def top(c: int) -> int:
        members = classes[c]
        return members[-1] if members else -1

    def close_p() -> None:
        i = last("p")
        if i > top(_BUTTON):
            pop_to(i)

    def drop_entry(serial: int) -> None:
        nonlocal off
        noah[live.pop(serial)].remove(serial)
        del after[serial]
        if serial not in at:
            off -= 1

    def latest_entry(name: str) -> int:
        entries = latest.get(name)
        while entries and entries[-1] not in live:
            entries.pop()
        return entries[-1] if entries else 0

    def is_foreign(i: int) -> bool:
        j = bisect.bisect_left(foreign, i)
        return j < len(foreign) and foreign[j] == i

    def leave_foreign() -> None:
        """A tag that leaves foreign content: the builder closes the foreign elements on top (up
        to an HTML element or an integration point) and handles the tag as HTML."""
        i, j = len(names), len(foreign) - 1
        while j >= 0 and foreign[j] == i - 1 and names[i - 1] not in _INTEGRATION and not (maybe and maybe[-1] == i - 1):
            i -= 1
            j -= 1
        pop_to(i)

    push("html", None)
    push("body", None)
    search = TOKEN.search
    pos = 0
    while True:
        t = search(html, pos)
        if t is None:
            break
        pos = t.end()
        slash, name, attrs, end_of_tag = t.groups()
        if name is None:
            continue
        if end_of_tag is None:  # the input ends inside the tag: the tokenizer drops it, and stops
            break
        name = name.lower() if name.isascii() else name.translate(ASCII_LOWER)
        top_foreign = bool(foreign) and foreign[-1] == len(names) - 1  # the current node is foreign
        if slash:  # an end tag
            if not top_foreign and names[-1] == name:  # the common cases: it closes the current node
                if name not in _NOT_PLAIN:
                    names.pop()
                    marks.pop()
                    where[name].pop()
                    continue
                if name in _SIMPLE_END:
                    names.pop()
                    marks.pop()
                    where[name].pop()
                    for c in _CLASS_OF.get(name, ()):
                        classes[c].pop()
                    continue
            if top_foreign:
                if name == "p" or name == "br":
                    leave_foreign()
                else:
                    # Closes the nearest element of that name if only foreign elements are above
                    # it; else the HTML rules decide (below), unless the current node may be an
                    # HTML element (then it is left open).
                    i = last(name)
                    if i < 0:
                        continue
                    if len(foreign) - bisect.bisect_left(foreign, i) == len(names) - i and not (maybe and maybe[-1] >= i):
                        pop_to(i)
                        continue
                    if maybe and maybe[-1] == len(names) - 1:
                        continue
            if foreign and is_foreign(last(name)):
                continue  # the HTML rules close HTML elements only: leave it open
            if name in _FORMATTING:
                # The adoption agency, where it simply closes the element; where it would move
                # elements or drop an entry, the element and entry go on counting.
                entry = latest_entry(name)
                if entry:
                    i = at.get(entry, -1)
                    if i > top(_SPEC):  # open, with nothing special (nor a scope boundary) above it
                        drop_entry(entry)
                        pop_to(i)
                    continue
            i = last(name)
            if i < 0:
                continue
            if name == "p":
                if i > top(_BUTTON):
                    pop_to(i)
            elif name in _SCOPED_END:
                if i >= top(_DEFAULT):
                    pop_to(i)
            elif name == "li":
                if i > top(_LIST):
                    pop_to(i)
            elif name in _HEADINGS:
                i = max(last(h) for h in _HEADINGS)
                if i > top(_DEFAULT):
                    pop_to(i)
            elif name in _TABLE_PARTS:
                t_i = top(_TABLE)
                if 0 <= t_i < i and names[t_i] == "table":
                    pop_to(i)
            elif name == "table":
                if i == top(_TABLE):
                    pop_to(i)
            elif name == "template":
                pop_to(i)
            elif name == "select":  # closes it when only options are open above it
                above = len(names) - 1 - i
                for o in ("option", "optgroup"):
                    o_at = where.get(o, ())
                    above -= len(o_at) - bisect.bisect_right(o_at, i)
                if above == 0:
                    pop_to(i)
            elif name in _SPECIAL:  # head, form, ...: only when it is the current node
                if i == len(names) - 1 and name not in ("body", "html"):
                    pop_to(i)
            elif i > top(_SPEC):  # any other end tag: closes it unless a special element is in between
                pop_to(i)
            continue
        # a start tag
        if top_foreign:  # in foreign content (or an integration point, which may hold HTML)
            if not (name in _BREAKOUT or name == "font" and _FONT_BREAKS.search(attrs)):
                if name == "svg" or name == "math":
                    kind = _FOREIGN
                elif names[-1] in _INTEGRATION or maybe and maybe[-1] == len(names) - 1:
                    kind = _MAYBE  # perhaps an HTML element: "/>" does not close it
                else:
                    kind = _FOREIGN
                if (end_of_tag != "/>" or kind == _MAYBE) and push(name, attrs if kind == _MAYBE else None, kind):
                    return best
                continue
            leave_foreign()
        if name not in _NOT_PLAIN or name in _SIMPLE_START:  # the common cases
            i = len(names)
            if name in _SIMPLE_START:
                p_at = where.get("p")
                if p_at and p_at[-1] > top(_BUTTON):
                    pop_to(p_at[-1])
                    i = len(names)
                for c in _CLASS_OF.get(name, ()):
                    classes[c].append(i)
            w = where.get(name)
            if w is None:
                where[name] = [i]
            else:
                w.append(i)
            names.append(name)
            marks.append(0)
            if i + 1 + off > best:
                best = i + 1 + off
                if best > limit:
                    return best
            continue
        if name in _VOID:
            if name == "hr":
                close_p()
            continue
        if name in once:
            continue
        if name == "html" or name == "head" or name == "body":
            once.add(name)
        elif name == "svg" or name == "math":
            if end_of_tag != "/>" and push(name, None, _FOREIGN):
                return best
            continue
        elif name in _CLOSES_P:
            close_p()
            if name in _HEADINGS and names[-1] in _HEADINGS:
                pop_to(len(names) - 1)
        elif name == "li" or name == "dd" or name == "dt":
            i = last("li") if name == "li" else max(last("dd"), last("dt"))
            if i >= 0 and i == top(_SPEC_LI):
                pop_to(i)
            close_p()
        elif name == "a":
            # An "a" entry after the last marker is closed (or at least dropped) by a new one.
            entry = latest_entry("a")
            if entry and after[entry] == markers[-1]:
                i = at.get(entry, -1)
                drop_entry(entry)
                if i > top(_SPEC):
                    pop_to(i)
        elif name == "option" or name == "optgroup":
            if names[-1] == "option":
                pop_to(len(names) - 1)
        elif name in ("rb", "rtc", "rp", "rt"):
            if last("ruby") > top(_DEFAULT):  # a ruby in scope: close the implied end tags
                keep = "rtc" if name in ("rp", "rt") else ""
                i = len(names)
                while names[i - 1] in _RUBY_IMPLIED and names[i - 1] != keep:
                    i -= 1
                pop_to(i)
        elif name == "button":
            i = last("button")
            if i > top(_DEFAULT):
                pop_to(i)
        elif name == "td" or name == "th" or name == "tr":
            t_i = top(_TABLE)
            if t_i >= 0 and names[t_i] == "table":  # in a table: close the open cell, or row
                cell = max(last("td"), last("th"))
                row = last("tr")
                if name == "tr" and row > t_i:
                    pop_to(row)
                elif cell > t_i and cell > row:
                    pop_to(cell)
                elif name != "tr" and row > t_i:
                    pop_to(row + 1)
                if name == "tr" or last("tr") < t_i:  # the row group and row the builder inserts
                    if max(last("tbody"), last("thead"), last("tfoot")) < t_i:
                        pop_to(t_i + 1)
                        if push("tbody", None):
                            return best
                    if name != "tr" and push("tr", None):
                        return best
        elif name in _TABLE_PARTS or name == "table":
            t_i = top(_TABLE)
            if t_i >= 0 and names[t_i] == "table":
                if name == "table":
                    # In a table but not in a cell or caption (elements fostered out of the table
                    # are not either): the new table closes the open one.
                    if max(last("td"), last("th"), last("caption")) < t_i:
                        pop_to(t_i)
                elif len(names) > t_i + 1:
                    pop_to(t_i + 1)
        if push(name, attrs):
            return best
        if name in RAW and not no_raw:
            found = raw_end(name).search(html, pos)
            pop_to(len(names) - 1)
            if found is None:
                break
            pos = found.start()
        # (After <plaintext> the rest is text where the builder accepts it; reading on as tags
        # only counts more.)
    return best


def raw_end(name: str) -> re.Pattern[str]:
    """Where the content of raw-text element ``name`` ends: its end tag, ASCII case-insensitive."""
    end = _RAW_END.get(name)
    if end is None:
        end = _RAW_END[name] = re.compile(r"</" + name + r"[\t\n\f\r />]", re.I | re.A)
    return end
