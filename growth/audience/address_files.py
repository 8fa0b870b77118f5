"""Read lists of addresses (a CSV upload, or text pasted into a form) into valid, repeated and
invalid entries, each with its line number. Nothing here touches the database."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from typing import BinaryIO

from django.core.exceptions import ValidationError

from growth.audience.addresses import Address, parse_address

MAX_FILE_BYTES = 20 * 1024 * 1024
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet may run as a formula
QUOTE = "'"  # a spreadsheet's mark of a cell that is text
_QUOTED = (*FORMULA_STARTS, QUOTE)  # the cells an export quotes
# The names a header gives the address column, the likeliest first: "address" alone may head a
# postal address beside an "email" column.
HEADER_NAMES = ("email", "e-mail", "email address", "email_address", "mail", "address")
_SEPARATORS = re.compile(r"[\s,;]+")
_FIRST_LINE = re.compile(r"[^\r\n]*")


class UnreadableFile(ValueError):
    """The file as a whole cannot be read: nothing of it may be imported."""


@dataclass(frozen=True, slots=True)
class Entry:
    line: int
    address: Address


@dataclass(frozen=True, slots=True)
class Repeat:
    line: int
    email: str
    first_line: int


@dataclass(frozen=True, slots=True)
class Invalid:
    line: int
    value: str
    reason: str


@dataclass
class AddressList:
    """Every address once (its first line), the lines repeating an earlier one, the invalid ones."""

    entries: list[Entry] = field(default_factory=list)
    repeats: list[Repeat] = field(default_factory=list)
    invalid: list[Invalid] = field(default_factory=list)
    _first_line: dict[str, int] = field(default_factory=dict, repr=False)

    def add(self, line: int, raw: str) -> None:
        value = spreadsheet_value(raw.strip())
        if not value:
            self.invalid.append(Invalid(line, raw, "no address"))
            return
        try:
            address = parse_address(value)
        except ValidationError as exc:
            self.invalid.append(Invalid(line, value, _reason(exc)))
            return
        first = self._first_line.get(address.email_lower)
        if first is None:
            self._first_line[address.email_lower] = line
            self.entries.append(Entry(line, address))
        else:
            self.repeats.append(Repeat(line, address.email, first))


def read_text(text: str) -> AddressList:
    """Addresses typed or pasted: one or more per line, separated by spaces, commas or semicolons."""
    found = AddressList()
    for line, content in enumerate(text.splitlines(), start=1):
        for token in _SEPARATORS.split(content.strip()):
            if token:
                found.add(line, token)
    return found


def read_csv(upload: BinaryIO) -> AddressList:
    """Read an uploaded CSV file: UTF-8, comma, semicolon or tab separated. The address column is
    the one headed "email" (or "e-mail", "address"...: the first of HEADER_NAMES a column has);
    without such a header, the first column, and the first line is an address too. Raise
    UnreadableFile if the file cannot be read whole, or if two columns claim the addresses."""
    data = upload.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise UnreadableFile(f"The file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB: "
                             "split it into smaller files.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UnreadableFile(f"Line {line} is not UTF-8 text: save the file as CSV UTF-8 "
                             "and upload it again.") from None
    if not text.strip():
        raise UnreadableFile("The file is empty.")
    reader = csv.reader(io.StringIO(text, newline=""), dialect=_dialect(text), strict=True)
    found = AddressList()
    column: int | None = None
    try:
        for row in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if column is None:
                column = _header_column(row)
                if column is not None:
                    continue
                column = 0
            found.add(line, row[column] if column < len(row) else "")
    except csv.Error as exc:
        raise UnreadableFile(f"Line {reader.line_num} cannot be read as CSV ({exc}).") from None
    return found


def spreadsheet_safe(text: str) -> str:
    """Keep a cell (an address like ``=cmd|'/c calc'!a0@example.com`` is valid) from being run as
    a formula when the file is opened in a spreadsheet: a leading quote makes it text. A cell that
    starts with a quote of its own (``'=a@example.com`` is valid too) gets one more, so that the
    import can tell the two apart."""
    return QUOTE + text if text.startswith(_QUOTED) else text


def spreadsheet_value(cell: str) -> str:
    """The inverse of ``spreadsheet_safe``: an export read back is the list it was."""
    if cell.startswith(QUOTE) and cell[1:].startswith(_QUOTED):
        return cell[1:]
    return cell


def _dialect(text: str) -> type[csv.Dialect]:
    """Excel's dialect with the file's delimiter. A header that names the address column under
    one delimiter decides it: the sniffer guesses by quotes too, across lines, and a cell like
    ``550; 'no'; such user`` in an export of ours made it take ';' for a file of commas. Only
    the delimiter is sniffed: the sniffer would take the quote that makes a formula-like cell
    text (``'=1+2@example.com``) for the file's quote character."""
    # the first line, whatever ends it: a file saved with CR line ends (a Mac's "CSV") has no
    # "\n", and a "\r" in what csv.reader is given as one line is a csv.Error
    header = _FIRST_LINE.match(text.lstrip("\r\n"))[0]
    for delimiter in ",;\t":
        try:
            cells = next(csv.reader([header], delimiter=delimiter), [])
        except csv.Error:  # a cell past csv's field limit: the reading refuses it, with its line
            return csv.excel
        if len(cells) > 1 and any(cell.strip().lower() in HEADER_NAMES for cell in cells):
            return type("Sniffed", (csv.excel,), {"delimiter": delimiter})
    try:
        delimiter = csv.Sniffer().sniff(text[:4096], delimiters=",;\t").delimiter
    except csv.Error:  # one column, or nothing to tell the delimiter by
        return csv.excel
    return type("Sniffed", (csv.excel,), {"delimiter": delimiter})


def _header_column(row: list[str]) -> int | None:
    names = [cell.strip().lower() for cell in row]
    for name in HEADER_NAMES:
        columns = [index for index, cell in enumerate(names) if cell == name]
        if len(columns) > 1:
            numbers = ", ".join(str(index + 1) for index in columns)
            raise UnreadableFile(f'Columns {numbers} are all headed "{row[columns[0]].strip()}": '
                                 "keep the one that holds the addresses and upload again.")
        if columns:
            return columns[0]
    return None


def _reason(exc: ValidationError) -> str:
    """The "why" of parse_address's message (the value is shown beside it anyway)."""
    error = exc.error_list[0]
    reason = (error.params or {}).get("reason")
    if reason is not None:
        return str(reason)
    return error.messages[0].rpartition("valid email address: ")[2]
