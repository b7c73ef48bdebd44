"""A report page's tables and marked elements read back as text, as a reader sees them (for the
tests that check a page against the report's model: test_outputs_agree, test_unrestored_*)."""

from __future__ import annotations

from html.parser import HTMLParser


class Tables(HTMLParser):
    """Each table's body rows as lists of their cells' text, by the table's id or class; and the
    text of each element with an id (h1's badge, the headline's items, the block naming the hosts
    left changed: None when there is none)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self.items: list[tuple[str, str]] = []  # (class, text) of each li in ul#headline
        self.badge = ""
        self.unrestored: str | None = None
        self._unrestored: list[str] | None = None
        self._table: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._li: tuple[str, list[str]] | None = None
        self._in_headline = False
        self._in_h1 = False
        self._svg = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "svg":
            self._svg += 1
        if a.get("id") == "unrestored":
            self._unrestored = []
        if tag == "table":
            self._table.append(a.get("id") or a.get("class", ""))
        elif tag == "tr" and self._table:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "ul" and a.get("id") == "headline":
            self._in_headline = True
        elif tag == "li" and self._in_headline:
            self._li = (a.get("class", ""), [])
        elif tag == "h1":
            self._in_h1 = True
        elif tag == "span" and self._in_h1 and "badge" in a.get("class", ""):
            self.badge = a.get("class", "").split()[-1]

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._svg -= 1
        if tag == "table" and self._table:
            self._table.pop()
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table:
            self.tables.setdefault(self._table[-1], []).append(self._row)
            self._row = None
        elif tag == "li" and self._li is not None:
            self.items.append((self._li[0], " ".join("".join(self._li[1]).split())))
            self._li = None
        elif tag == "ul":
            self._in_headline = False
        elif tag == "h1":
            self._in_h1 = False
        elif tag == "div" and self._unrestored is not None:
            self.unrestored, self._unrestored = " ".join("".join(self._unrestored).split()), None

    def handle_data(self, data: str) -> None:
        if self._svg:
            return  # a trend's SVG titles are its own text
        if self._cell is not None:
            self._cell.append(data)
        if self._li is not None:
            self._li[1].append(data)
        if self._unrestored is not None:
            self._unrestored.append(data)


def parsed(html: str) -> Tables:
    tables = Tables()
    tables.feed(html)
    return tables


class _Text(HTMLParser):
    """A page's visible words: every text node outside svg, script and style."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.words: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("svg", "script", "style"):
            self._hidden += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("svg", "script", "style"):
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.words.append(data)


def text(html: str) -> str:
    """The page's text as a reader sees it, whitespace collapsed (for tests of which sentences a
    page says)."""
    reader = _Text()
    reader.feed(html)
    return " ".join(" ".join(reader.words).split())
