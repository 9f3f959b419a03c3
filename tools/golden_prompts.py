#!/usr/bin/env python3
"""Writes tests/fixtures/golden_prompts.json: eight token-id prompts per golden model, random within its vocab
from a fixed seed. Lengths 1, 7, 16, 17, 33, 100 (around 16-token block boundaries) and two prompts sharing a
40-token prefix (prefix caching). The 7-token prompt holds the vocab's first and last ids (embedding bounds).
Also tests/fixtures/golden_prompts_qwen3_8b.json: four prompts of 7, 64, 257 and 600 tokens for the Qwen3-8B-shaped
random checkpoint (its tensor-parallel test runs them at TP 1, 2 and 4).

  python3 tools/golden_prompts.py   # from the repository root; rewrites the JSON files (they are committed)
"""
import json
import os
import random

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["golden_tied_gqa2", "golden_untied_sharded", "qwen2_bias"]
LENGTHS = [1, 7, 16, 17, 33, 100]
SHARED_PREFIX = 40
SHARED_TAILS = [9, 23]
QWEN3_8B_LENGTHS = [7, 64, 257, 600]


def prompts_for(vocab_size, rng):
    def tokens(n):
        return [rng.randrange(vocab_size) for _ in range(n)]

    prompts = [tokens(n) for n in LENGTHS]
    prompts[1][2], prompts[1][5] = 0, vocab_size - 1
    prefix = tokens(SHARED_PREFIX)
    prompts += [prefix + tokens(n) for n in SHARED_TAILS]
    return prompts


def vocab_size_of(*config_path):
    with open(os.path.join(ROOT, "tools", "configs", *config_path)) as f:
        return json.load(f)["vocab_size"]


def write_prompts(file_name, prompts_by_model):
    """One prompt list per line, keyed by model name, so diffs of the committed files stay readable."""
    path = os.path.join(ROOT, "tests", "fixtures", file_name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    entries = []
    for name, prompts in prompts_by_model.items():
        rows = ",\n    ".join(json.dumps(p) for p in prompts)
        entries.append(f'  "{name}": [\n    {rows}\n  ]')
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(entries) + "\n}\n")
    print(f"wrote {path}")


def main():
    write_prompts("golden_prompts.json", {
        name: prompts_for(vocab_size_of(name + ".json"), random.Random(1000 + seed))
        for seed, name in enumerate(MODELS)
    })
    rng = random.Random(8008)
    vocab_size = vocab_size_of("qwen3", "Qwen3-8B.json")
    write_prompts("golden_prompts_qwen3_8b.json",
                  {"qwen3_8b_shape": [[rng.randrange(vocab_size) for _ in range(n)] for n in QWEN3_8B_LENGTHS]})

if __name__ == "__main__":
    main()
