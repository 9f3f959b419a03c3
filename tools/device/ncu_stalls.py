#!/usr/bin/env python3
"""Where a kernel's warps wait: the most-sampled SASS instructions of an ncu source export, with their main
stall reasons, and the stall reasons summed over the kernel.

Make the export on the GPU machine (one kernel launch; the application's own output may precede the table):
  ncu --kernel-name regex:NAME --launch-skip N --launch-count 1 --section SourceCounters \\
      --section WarpStateStats --page source --csv --print-source sass ./binary ... > src.csv
then:
  tools/device/ncu_stalls.py src.csv [--top 25]
"""
import argparse
import sys

from ncu_csv import read_ncu_table

SAMPLES = "Warp Stall Sampling (All Samples)"


def as_int(text):
    try:
        return int(text.replace(",", ""))
    except ValueError:
        return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("export", help="CSV written by ncu --page source --csv --print-source sass")
    parser.add_argument("--top", type=int, default=25, help="instructions to list (default 25)")
    args = parser.parse_args()

    header, rows = read_ncu_table(args.export, SAMPLES, "Source")
    samples = header.index(SAMPLES)
    source = header.index("Source")
    stalls = [(i, name) for i, name in enumerate(header) if name.startswith("stall_") and "Not Issued" not in name]
    total = sum(as_int(r[samples]) for r in rows)
    if total == 0:
        sys.exit(f"{args.export}: no stall samples")

    print(f"{len(rows)} instructions, {total} samples")
    print("\nby stall reason:")
    by_reason = sorted(((sum(as_int(r[i]) for r in rows), name) for i, name in stalls), reverse=True)
    for count, name in by_reason:
        if count:
            print(f"  {name[len('stall_'):]:<18} {count:>7} {100.0 * count / total:5.1f}%")

    print(f"\ntop {args.top} instructions:")
    for r in sorted(rows, key=lambda r: -as_int(r[samples]))[: args.top]:
        count = as_int(r[samples])
        if count == 0:
            break
        reasons = sorted(((as_int(r[i]), name[len("stall_"):]) for i, name in stalls), reverse=True)[:2]
        why = ", ".join(f"{name} {n}" for n, name in reasons if n)
        print(f"  {count:>6} {100.0 * count / total:5.1f}%  {r[source].strip()[:60]:<60}  {why}")


if __name__ == "__main__":
    main()
