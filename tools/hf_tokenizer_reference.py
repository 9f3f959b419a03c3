#!/usr/bin/env python3
"""Reference fixtures and benchmark from Hugging Face tokenizers/transformers (run where they are installed).

Writes into --out (default tests/fixtures/tokenizer/):
  hf_encode.json  per corpus document: ids (transformers tokenizer(text)["input_ids"]) and decode() of them with
                  and without skip_special_tokens (HF tokenizers' decode)
  hf_chat.json    per conversation of chat_conversations.json: apply_chat_template(..., tokenize=False)
and prints HF tokenizers' single-thread encode throughput (MB/s) on the same documents bench_tokenizer uses.

No network: the tokenizer folder is local (scripts/fetch_tokenizer.sh fetches it).
  python3 tools/hf_tokenizer_reference.py --tokenizer-dir third_party_data/qwen3-tokenizer
  python3 tools/hf_tokenizer_reference.py --tokenizer-dir DIR --bench-only
"""
import argparse
import json
import os
import pathlib
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = pathlib.Path(__file__).resolve().parent.parent


def load_documents(corpus: pathlib.Path):
    """(name, text) pairs: every *.txt file whole, then every string of snippets.json. Same order as the C++ tests."""
    docs = []
    for path in sorted(corpus.glob("*.txt")):
        docs.append((path.name, path.read_bytes().decode("utf-8")))
    snippets = corpus / "snippets.json"
    if snippets.exists():
        for i, text in enumerate(json.loads(snippets.read_text("utf-8"))):
            docs.append((f"snippets.json[{i}]", text))
    return docs


def bench(tokenizer, docs, seconds: float) -> float:
    texts = [t for _, t in docs]
    total_bytes = sum(len(t.encode("utf-8")) for t in texts)
    for t in texts:  # warm the word cache, as the C++ bench does
        tokenizer.encode(t)
    rounds, start = 0, time.perf_counter()
    while True:
        for t in texts:
            tokenizer.encode(t)
        rounds += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    return total_bytes * rounds / elapsed / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer-dir", default=str(REPO / "third_party_data" / "qwen3-tokenizer"))
    parser.add_argument("--corpus", default=str(REPO / "tools" / "tokenizer_corpus"))
    parser.add_argument("--out", default=str(REPO / "tests" / "fixtures" / "tokenizer"))
    parser.add_argument("--bench-seconds", type=float, default=5.0)
    parser.add_argument("--bench-only", action="store_true")
    args = parser.parse_args()

    import tokenizers
    from tokenizers import Tokenizer

    tok_dir = pathlib.Path(args.tokenizer_dir)
    corpus = pathlib.Path(args.corpus)
    docs = load_documents(corpus)
    fast = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))

    if not args.bench_only:
        import transformers
        from transformers import AutoTokenizer

        auto = AutoTokenizer.from_pretrained(str(tok_dir), local_files_only=True)
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        records, mismatches = [], 0
        for name, text in docs:
            ids = list(auto(text)["input_ids"])
            raw_ids = fast.encode(text).ids
            if list(raw_ids) != ids:
                mismatches += 1
                print(f"note: transformers and tokenizers disagree on {name}", file=sys.stderr)
            records.append({
                "name": name,
                "ids": ids,
                "decoded": fast.decode(ids, skip_special_tokens=False),
                "decoded_skip_special": fast.decode(ids, skip_special_tokens=True),
            })
        versions = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__}
        (out / "hf_encode.json").write_text(
            json.dumps({"versions": versions, "documents": records}, ensure_ascii=False, separators=(",", ":")),
            encoding="utf-8")
        chats = []
        for conv in json.loads((corpus / "chat_conversations.json").read_text("utf-8")):
            kwargs = {"tokenize": False, "add_generation_prompt": conv.get("add_generation_prompt", False)}
            if "tools" in conv:
                kwargs["tools"] = conv["tools"]
            if "enable_thinking" in conv:
                kwargs["enable_thinking"] = conv["enable_thinking"]
            chats.append({"name": conv["name"], "text": auto.apply_chat_template(conv["messages"], **kwargs)})
        (out / "hf_chat.json").write_text(json.dumps({"versions": versions, "conversations": chats}, ensure_ascii=False, indent=1),
                                          encoding="utf-8")
        print(f"wrote {len(records)} documents ({mismatches} tokenizers/transformers disagreements) and {len(chats)} chats to {out}")

    total = sum(len(t.encode("utf-8")) for _, t in docs)
    mbps = bench(fast, docs, args.bench_seconds)
    print(f"HF tokenizers {tokenizers.__version__} encode, 1 thread: {mbps:.2f} MB/s on {total / 1e6:.3f} MB ({len(docs)} documents)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
