"""nano-vLLM's bench.py, run through the nanovllm Python package: 256 requests of 100-1024 random token ids, each
with 100-1024 output tokens (ignore_eos), after one warm-up request. Prints the same line as nano-vLLM's bench.

    python3 tools/bench_python.py --model tools/configs/qwen3/Qwen3-0.6B.json --load-format dummy
"""
import argparse
import time
from random import randint, seed

from nanovllm import LLM, SamplingParams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model folder, or a config.json with --load-format dummy")
    parser.add_argument("--load-format", default="auto", choices=["auto", "dummy"])
    parser.add_argument("--max-model-len", type=int, default=4096)
    args = parser.parse_args()

    seed(0)
    num_seqs, max_input_len, max_output_len = 256, 1024, 1024
    llm = LLM(args.model, load_format=args.load_format, max_model_len=args.max_model_len)
    prompt_token_ids = [[randint(0, 10000) for _ in range(randint(100, max_input_len))] for _ in range(num_seqs)]
    sampling_params = [SamplingParams(temperature=0.6, ignore_eos=True, max_tokens=randint(100, max_output_len))
                       for _ in range(num_seqs)]
    llm.generate([[1, 2, 3]], SamplingParams(max_tokens=8), use_tqdm=False)  # warm-up (token ids: no tokenizer)
    start = time.time()
    llm.generate(prompt_token_ids, sampling_params, use_tqdm=False)
    elapsed = time.time() - start
    total_tokens = sum(sp.max_tokens for sp in sampling_params)
    print(f"Total: {total_tokens}tok, Time: {elapsed:.2f}s, Throughput: {total_tokens / elapsed:.2f}tok/s")


if __name__ == "__main__":
    main()
