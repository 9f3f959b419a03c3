#!/usr/bin/env python3
"""Golden reference outputs from Hugging Face transformers, for nanovllm's golden tests.

Loads a model folder in float32 (eager attention, TF32 off) and, for each prompt (a list of token ids), writes
  prompt_logprobs: per position, null for position 0, else [[prompt token, its logprob], [top-1 id, logprob], ...]
  greedy_token_ids / greedy_logprobs: a greedy continuation of --new-tokens tokens (EOS does not stop it),
                                      recomputed from scratch every step (no KV cache), and each token's logprob.
Log-softmax is taken in float64 of the float32 logits. Top-k ties keep the lower token id first.

  python3 tools/hf_reference.py --model DIR --prompts PROMPTS.json --out FIXTURE.json [--device cuda]

PROMPTS.json is a list of token-id lists, or an object of such lists keyed by model name (then --prompts-key, by
default the model folder's name, picks one).
"""
import argparse
import glob
import json
import os

import torch
import transformers
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def exact_float32_matmuls():
    """Full-precision fp32 matmuls: the reference must not round through TF32."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def log_softmax64(logits):
    return torch.log_softmax(logits.to(torch.float64), dim=-1)


def top_k(logprobs, k):
    """The k largest (id, logprob) pairs, descending; a stable sort keeps the lower id first on ties."""
    values, ids = torch.sort(logprobs, descending=True, stable=True)
    return [[int(i), float(v)] for i, v in zip(ids[:k].tolist(), values[:k].tolist())]


@torch.no_grad()
def logits_of(model, token_ids, device):
    input_ids = torch.tensor([token_ids], dtype=torch.long, device=device)
    return model(input_ids=input_ids, use_cache=False).logits[0].float()  # [T, V]


@torch.no_grad()
def reference_for_prompt(model, prompt, device, new_tokens, k):
    logprobs = log_softmax64(logits_of(model, prompt, device)).cpu()
    prompt_logprobs = [None]
    for pos in range(1, len(prompt)):
        row = logprobs[pos - 1]
        token = prompt[pos]
        prompt_logprobs.append([[token, float(row[token])]] + top_k(row, k))

    tokens = list(prompt)
    greedy_ids, greedy_logprobs, greedy_margins = [], [], []
    row = logprobs[-1]
    for step in range(new_tokens):
        if step > 0:
            row = log_softmax64(logits_of(model, tokens, device)[-1]).cpu()
        token = int(torch.argmax(row))  # first index of the maximum on ties
        top2 = torch.topk(row, 2).values
        greedy_margins.append(float(top2[0] - top2[1]))  # how near a tie this step is (bf16 may flip those)
        greedy_ids.append(token)
        greedy_logprobs.append(float(row[token]))
        tokens.append(token)
    return {
        "prompt_token_ids": list(prompt),
        "prompt_logprobs": prompt_logprobs,
        "greedy_token_ids": greedy_ids,
        "greedy_logprobs": greedy_logprobs,
        "greedy_top2_margins": greedy_margins,
    }


def check_weights_loaded(model, folder):
    """Every checkpoint tensor must reach the model unchanged, and nothing may be left randomly initialised."""
    state = model.state_dict()
    seen = set()
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        for name, tensor in load_file(path).items():
            if name not in state:
                raise SystemExit(f"{path}: tensor '{name}' is not a parameter of the HF model")
            if not torch.equal(state[name].detach().cpu(), tensor.to(torch.float32)):
                raise SystemExit(f"{path}: tensor '{name}' differs after loading")
            seen.add(name)
    if model.config.tie_word_embeddings and "lm_head.weight" not in seen:
        if not torch.equal(state["lm_head.weight"], state["model.embed_tokens.weight"]):
            raise SystemExit("tied lm_head.weight differs from model.embed_tokens.weight")
        seen.add("lm_head.weight")
    missing = sorted(set(state) - seen)
    if missing:
        raise SystemExit(f"{folder}: parameters not in the checkpoint: {missing[:5]}")


def load_prompts(path, key):
    with open(path) as f:
        prompts = json.load(f)
    if isinstance(prompts, dict):
        if key not in prompts:
            raise SystemExit(f"{path}: has no prompts for '{key}' (has: {', '.join(sorted(prompts))})")
        prompts = prompts[key]
    if not all(isinstance(p, list) and p and all(isinstance(t, int) for t in p) for p in prompts):
        raise SystemExit(f"{path}: prompts must be non-empty lists of token ids")
    return prompts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="Hugging Face model folder")
    parser.add_argument("--prompts", required=True, help="JSON list of token-id lists (or an object of them)")
    parser.add_argument("--prompts-key", help="key into an object of prompt lists; default: the model folder name")
    parser.add_argument("--out", required=True, help="fixture JSON to write")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--prompt-logprobs-k", type=int, default=5)
    args = parser.parse_args()

    exact_float32_matmuls()
    name = os.path.basename(os.path.normpath(args.model))
    prompts = load_prompts(args.prompts, args.prompts_key or name)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="eager")
    check_weights_loaded(model, args.model)
    model.to(args.device).eval()
    vocab_size = model.config.vocab_size
    for prompt in prompts:
        if not all(0 <= t < vocab_size for t in prompt):
            raise SystemExit(f"a prompt has a token id outside [0, {vocab_size})")

    fixture = {
        "model": name,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "device": args.device,
        "dtype": "float32",
        "new_tokens": args.new_tokens,
        "prompt_logprobs_k": args.prompt_logprobs_k,
        "prompts": [reference_for_prompt(model, p, args.device, args.new_tokens, args.prompt_logprobs_k) for p in prompts],
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    first = fixture["prompts"][0]
    print(f"{name}: {len(prompts)} prompts -> {args.out} (first greedy ids {first['greedy_token_ids'][:8]})")


if __name__ == "__main__":
    main()
