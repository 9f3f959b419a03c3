"""Reading ncu's --csv output: the application's own lines may come first, then one table."""
import csv
import sys


def read_ncu_table(path, *columns):
    """The table's header (the first row naming every one of `columns`) and its rows of the header's width."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    for i, row in enumerate(rows):
        if all(column in row for column in columns):
            return row, [r for r in rows[i + 1:] if len(r) == len(row)]
    sys.exit(f"{path}: no ncu table (a header naming {', '.join(repr(c) for c in columns)})")
