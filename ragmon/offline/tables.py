"""Records as rows of a table: a JSON array of objects, CSV (list and object columns as JSON
text) and Parquet (with the optional ``pyarrow``). Rows are numbered from 1; a null value or an
empty CSV cell is an absent key."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Collection, Iterator
from typing import Any, Final

from ragmon.errors import InputError

__all__ = ["MAX_ARRAY_BYTES", "MAX_CELL_CHARS", "PARQUET_HINT", "array_rows", "csv_rows", "decode_cells", "parquet_rows"]

MAX_ARRAY_BYTES: Final = 256 << 20
"""A JSON array is read whole: files larger than this are refused (JSON Lines streams)."""
MAX_CELL_CHARS: Final = 64 << 20
"""The longest CSV cell read (Python's ``csv`` stops at 128 Ki characters by default)."""
PARQUET_HINT: Final = "reading Parquet needs pyarrow: pip install 'ragmon[parquet]'"
_BATCH_ROWS: Final = 1024
_EXTRA: Final = "\x00extra"
"""The key ``csv.DictReader`` gives the cells of a row longer than the header."""

Rows = Iterator[tuple[int, dict[str, Any]]]


def _cannot_read(path: str, exc: OSError) -> InputError:
    return InputError(path, f"cannot read: {exc.strerror or exc}")


def array_rows(path: str) -> Rows:
    """The objects of a file holding one JSON array, read whole (at most ``MAX_ARRAY_BYTES``)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_ARRAY_BYTES:
                raise InputError(
                    path,
                    f"a JSON array is read whole: {size:,} bytes is more than {MAX_ARRAY_BYTES:,}; "
                    "write it as JSON Lines (one object a line), which is read as it streams",
                )
            data = handle.read(MAX_ARRAY_BYTES + 1)
    except OSError as exc:
        raise _cannot_read(path, exc) from None
    if len(data) > MAX_ARRAY_BYTES:
        raise InputError(path, f"a JSON array is read whole: more than {MAX_ARRAY_BYTES:,} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    del data
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    except RecursionError:
        raise InputError(path, "invalid JSON: nested too deeply") from None
    except ValueError as exc:
        raise InputError(path, f"invalid JSON: {exc}") from None
    if not isinstance(value, list):
        raise InputError(path, f"expected a JSON array of objects, got {type(value).__name__}")
    for row, item in enumerate(value, start=1):
        if not isinstance(item, dict):
            raise InputError(path, f"row {row}: expected a JSON object, got {type(item).__name__}")
        yield row, item


def csv_rows(path: str) -> Rows:
    """The rows of a CSV file with a header line, as ``column -> text`` (an empty cell: None),
    streamed."""
    try:
        handle = open(path, encoding="utf-8-sig", newline="")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise _cannot_read(path, exc) from None
    with handle:
        reader = csv.DictReader(handle, restkey=_EXTRA)
        row = 0
        while True:
            previous = csv.field_size_limit(MAX_CELL_CHARS)
            try:
                cells = next(reader, None)
                header = reader.fieldnames
            except UnicodeDecodeError as exc:  # decoded a block at a time: no row to name
                raise InputError(path, f"not UTF-8 ({exc.reason})") from None
            except csv.Error as exc:
                raise InputError(path, f"row {row + 1}: invalid CSV: {exc}") from None
            except OSError as exc:
                raise _cannot_read(path, exc) from None
            finally:
                csv.field_size_limit(previous)
            if row == 0 and header is not None:
                repeated = sorted({name for name in header if header.count(name) > 1})
                if repeated:
                    raise InputError(path, f'column "{repeated[0]:.100}" appears twice in the header', 1)
            if cells is None:
                return
            row += 1
            if _EXTRA in cells:
                raise InputError(path, f"row {row}: more cells than the header has columns")
            yield row, {key: (value if value else None) for key, value in cells.items()}


def decode_cells(cells: dict[str, Any], keys: Collection[str]) -> dict[str, Any]:
    """``cells`` with the text of each of ``keys`` (list and object columns) parsed as JSON;
    ``ValueError`` naming the column otherwise."""
    out = dict(cells)
    for key in keys:
        text = cells.get(key)
        if not isinstance(text, str):
            continue
        try:
            out[key] = json.loads(text)
        except (ValueError, RecursionError):
            raise ValueError(
                f'"{key}" must be JSON text in a CSV cell, e.g. ["a", "b"], got {text!r:.60}'
            ) from None
    return out


def parquet_rows(path: str) -> Rows:
    """The rows of a Parquet file, a batch at a time; ``InputError`` with ``PARQUET_HINT``
    when ``pyarrow`` is not installed."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below (a wrong path is said before a missing pyarrow)
    except OSError as exc:
        raise _cannot_read(path, exc) from None
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        handle.close()
        raise InputError(path, PARQUET_HINT) from None
    with handle:
        try:
            table = pyarrow.parquet.ParquetFile(handle)
        except (OSError, ValueError, pyarrow.ArrowException) as exc:
            raise InputError(path, f"not a Parquet file ({exc})") from None
        row = 0
        try:
            for batch in table.iter_batches(batch_size=_BATCH_ROWS):
                for item in batch.to_pylist():
                    row += 1
                    yield row, item
        except (OSError, ValueError, pyarrow.ArrowException) as exc:
            raise InputError(path, f"row {row + 1}: cannot read ({exc})") from None
