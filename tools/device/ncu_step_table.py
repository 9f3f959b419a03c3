#!/usr/bin/env python3
"""One decode step, kernel by kernel: the kernels of the first step of a given batch in an ncu duration export,
summed by kernel and launch grid, with each one's mean a launch and a layer.

Make the export on the GPU machine, eagerly (ncu does not time the kernels inside the decode graphs), with an
output long enough that every sequence decodes after the prefill, skipping the prefill's launches:
  ncu --launch-skip N --launch-count 900 --metrics gpu__time_duration.sum --csv --clock-control none \\
      nanovllm bench --model CONFIG --latency --batch-size B --input-len 1024 --output-len 24 --enforce-eager > t.csv
then:
  tools/device/ncu_step_table.py t.csv --rows B [--layers 28]
A step begins at its embedding kernel, whose grid has one block a row; the table is the first (or --step) step of
B rows with at least --min-kernels kernels (a step the launch count cut short is skipped). The numbers in
docs/performance.md ("The same step now") were made so: skips of 900 / 1500 / 3400 / 5900 launches for batch 1 (a
128-token prompt, --step 1) / 32 / 128 / 256 with the Qwen3-0.6B config.
"""
import argparse
import re
import sys
from collections import defaultdict

from ncu_csv import read_ncu_table

DURATION = "gpu__time_duration.sum"
UNIT_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}


def read_launches(path):
    """(kernel name without its parameter list, grid, µs) of every timed launch, in launch order."""
    header, rows = read_ncu_table(path, "Kernel Name", "Metric Value")
    name_col, grid_col = header.index("Kernel Name"), header.index("Grid Size")
    metric_col, unit_col, value_col = header.index("Metric Name"), header.index("Metric Unit"), header.index("Metric Value")
    launches = []
    for row in rows:
        if row[metric_col] != DURATION:
            continue
        if row[unit_col] not in UNIT_TO_US:
            sys.exit(f"{path}: unknown duration unit '{row[unit_col]}'")
        name = re.sub(r"^void ", "", re.sub(r"\(.*", "", row[name_col]))
        name = re.sub(r"\b\w+::(<unnamed>::)?", "", name)  # namespaces
        launches.append((name, row[grid_col], float(row[value_col].replace(",", "")) * UNIT_TO_US[row[unit_col]]))
    return launches


def steps_of(launches):
    """The launches cut into steps, each beginning at an embedding kernel."""
    steps = []
    for launch in launches:
        if launch[0].startswith("embedding_kernel"):
            steps.append([])
        if steps:
            steps[-1].append(launch)
    return steps


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("export", help="CSV written by ncu --metrics gpu__time_duration.sum --csv")
    parser.add_argument("--rows", type=int, required=True, help="the step's batch (its embedding grid)")
    parser.add_argument("--layers", type=int, default=28, help="decoder layers, for the means a layer (default 28)")
    parser.add_argument("--min-kernels", type=int, default=100, help="kernels a whole step has at least (default 100)")
    parser.add_argument("--step", type=int, default=0, help="which of the matching steps, from 0 (default 0)")
    args = parser.parse_args()

    grid = f"({args.rows}, 1, 1)"
    steps = [s for s in steps_of(read_launches(args.export)) if s[0][1] == grid and len(s) >= args.min_kernels]
    if len(steps) <= args.step:
        sys.exit(f"{args.export}: {len(steps)} steps of {args.rows} rows with {args.min_kernels}+ kernels, "
                 f"no step {args.step}")
    step = steps[args.step]
    by_kernel = defaultdict(lambda: [0, 0.0])
    for name, kernel_grid, us in step:
        entry = by_kernel[(name, kernel_grid)]
        entry[0] += 1
        entry[1] += us
    total = sum(us for _, _, us in step)
    print(f"one step of {args.rows} rows: {len(step)} kernels, {total:.1f} us (steps of that batch found: {len(steps)})")
    print(f"{'us':>10} {'launches':>8} {'us each':>9} {'us a layer':>10}  kernel  grid")
    for (name, kernel_grid), (count, us) in sorted(by_kernel.items(), key=lambda item: -item[1][1]):
        per_layer = f"{us / args.layers:10.2f}" if 2 * count >= args.layers else f"{'':10}"  # once a step
        print(f"{us:10.1f} {count:8d} {us / count:9.2f} {per_layer}  {name}  {kernel_grid}")


if __name__ == "__main__":
    main()
