#!/usr/bin/env python3
"""Trains hymt's demo model: a small HunYuanDenseV1 that translates en<->zh and en<->de.

Runs on the GPU host (torch, transformers, tokenizers, tiktoken, sacrebleu). Data: Tatoeba sentence pairs
(CC BY 2.0 FR, tatoeba.org). The vocabulary is a byte-level BPE trained on the corpus and written in the
hy.tiktoken format, with the Hunyuan special tokens and split rule; training examples use the real chat
template and Hunyuan-MT prompts, so the engine serves the model exactly as it serves Hunyuan-MT-7B.

  train_demo.py --data DIR (holds tatoeba/) --out DIR [--seconds 330]

Writes DIR/model (the HF folder for models/demo), DIR/loss.csv, DIR/loss.png, DIR/eval.json.
"""

import argparse
import csv
import json
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hy_common as hy  # noqa: E402

DIRECTIONS = [("en", "zh"), ("zh", "en"), ("en", "de"), ("de", "en")]
MODEL = dict(hidden=256, layers=8, heads=4, kv=2, head_dim=64, ffn=1024)
MAX_LEN = 160
TOKENS_PER_BATCH = 16384
MAX_NEW = 96


def read_pairs(data, pair, split):
    rows = []
    with open(os.path.join(data, "tatoeba", f"{pair}.{split}.tsv"), encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 2 and parts[0].strip() and parts[1].strip():
                rows.append((parts[0], parts[1]))
    return rows


def direction_pairs(data, split):
    """{(src, tgt): [(source text, reference)]} for the four directions."""
    out = {}
    for other in ("zh", "de"):
        pairs = read_pairs(data, f"en-{other}", split)
        out[("en", other)] = [(e, o) for e, o in pairs]
        out[(other, "en")] = [(o, e) for e, o in pairs]
    return out


def train_bpe(texts, vocab_size):
    """Byte-level BPE with the Hunyuan split rule; returns tiktoken ranks (bytes first, then merges)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(hy.HUNYUAN_PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[],
    )
    tk.train_from_iterator(texts, trainer)
    merges = json.loads(tk.to_str())["model"]["merges"]
    inv = {c: b for b, c in hy.bytes_to_unicode().items()}
    to_bytes = lambda s: bytes(inv[c] for c in s)
    ranks = {bytes([b]): b for b in range(256)}
    for m in merges:
        a, b = (m.split(" ", 1) if isinstance(m, str) else m)
        tok = to_bytes(a) + to_bytes(b)
        if tok not in ranks:
            ranks[tok] = len(ranks)
    return ranks


def encode_examples(enc, pairs, eos):
    """(input ids, target ids with -100 on the prompt) per example: the model learns only the answer."""
    out = []
    for (src, tgt), rows in pairs.items():
        for s, t in rows:
            p = enc.encode(hy.chat(hy.user_prompt(src, tgt, s)), allowed_special="all")
            a = enc.encode(t, allowed_special=set()) + [eos]
            seq = p + a
            if len(seq) > MAX_LEN:
                continue
            labels = [-100] * (len(p) - 1) + a
            out.append((seq[:-1], labels))
    return out


def batches(examples, pad, shuffle, rng):
    idx = list(range(len(examples)))
    if shuffle:
        rng.shuffle(idx)
        # Sort within large windows so batches have similar lengths (less padding) but still vary.
        w = 4096
        idx = sum((sorted(idx[i:i + w], key=lambda j: len(examples[j][0])) for i in range(0, len(idx), w)), [])
    else:
        idx.sort(key=lambda j: len(examples[j][0]))
    groups, cur, cur_max = [], [], 0
    for j in idx:
        n = len(examples[j][0])
        if cur and max(cur_max, n) * (len(cur) + 1) > TOKENS_PER_BATCH:
            groups.append(cur)
            cur, cur_max = [], 0
        cur.append(j)
        cur_max = max(cur_max, n)
    if cur:
        groups.append(cur)
    if shuffle:
        rng.shuffle(groups)
    for g in groups:
        L = max(len(examples[j][0]) for j in g)
        x = [examples[j][0] + [pad] * (L - len(examples[j][0])) for j in g]
        y = [examples[j][1] + [-100] * (L - len(examples[j][1])) for j in g]
        yield x, y


def greedy_translate(model, enc, rows, src, tgt, stop_ids, device, max_new=MAX_NEW):
    """HF greedy decoding with a KV cache; prompts are grouped by length so no padding is needed."""
    import torch

    prompts = [enc.encode(hy.chat(hy.user_prompt(src, tgt, s)), allowed_special="all") for s, _ in rows]
    by_len = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    hyps = [None] * len(rows)
    stop = torch.tensor(sorted(stop_ids), device=device)
    with torch.no_grad():
        for _, members in sorted(by_len.items()):
            for k in range(0, len(members), 256):
                group = members[k:k + 256]
                x = torch.tensor([prompts[i] for i in group], device=device)
                out = model(input_ids=x, use_cache=True)
                past, nxt = out.past_key_values, out.logits[:, -1].float().argmax(-1)
                gen = [[] for _ in group]
                done = torch.zeros(len(group), dtype=torch.bool, device=device)
                for _ in range(max_new):
                    is_stop = torch.isin(nxt, stop)
                    for r, (t, d, s) in enumerate(zip(nxt.tolist(), done.tolist(), is_stop.tolist())):
                        if not d and not s:
                            gen[r].append(t)
                    done |= is_stop
                    if bool(done.all()):
                        break
                    out = model(input_ids=nxt[:, None], past_key_values=past, use_cache=True)
                    past, nxt = out.past_key_values, out.logits[:, -1].float().argmax(-1)
                for r, i in enumerate(group):
                    hyps[i] = (enc.decode_bytes(gen[r]).decode("utf-8", errors="replace"), gen[r])
    return hyps


def main():
    import torch
    import torch.nn.functional as F
    from transformers import AutoConfig, AutoModelForCausalLM

    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=330.0)
    ap.add_argument("--vocab", type=int, default=12000)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    args = ap.parse_args()
    t_start = time.time()
    rng = random.Random(1234)
    torch.manual_seed(1234)
    device = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True

    train, dev, test = (direction_pairs(args.data, s) for s in ("train", "dev", "test"))
    texts = [t for rows in train.values() for pair in rows for t in pair]
    texts += [hy.user_prompt(s, t, "") for s, t in DIRECTIONS] * 200
    ranks = train_bpe(texts, args.vocab)
    enc = hy.make_encoding(ranks, "demo")
    specials = hy.special_tokens(len(ranks))
    eos, pad = specials["<|eos|>"], specials["<|pad|>"]
    n_tokens = len(ranks) + len(specials)
    vocab_rows = (n_tokens + 255) // 256 * 256
    print(f"bpe: {len(ranks)} ranks, {n_tokens} tokens, {vocab_rows} rows ({time.time() - t_start:.1f}s)", flush=True)

    train_ex = encode_examples(enc, train, eos)
    dev_ex = encode_examples(enc, dev, eos)
    n_target = sum(sum(1 for v in y if v != -100) for _, y in train_ex)
    print(f"examples: train {len(train_ex)} ({n_target} target tokens), dev {len(dev_ex)}", flush=True)

    cfg = AutoConfig.for_model(
        "hunyuan_v1_dense", vocab_size=vocab_rows, hidden_size=MODEL["hidden"],
        intermediate_size=MODEL["ffn"], num_hidden_layers=MODEL["layers"],
        num_attention_heads=MODEL["heads"], num_key_value_heads=MODEL["kv"], head_dim=MODEL["head_dim"],
        hidden_act="silu", max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0,
        rope_scaling={"type": "dynamic", "alpha": 1000.0, "factor": 1.0}, tie_word_embeddings=True,
        bos_token_id=specials["<|startoftext|>"], eos_token_id=eos, pad_token_id=pad, eod_token_id=eos,
        attention_bias=False, attention_dropout=0.0,
    )
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").float().to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f} M parameters", flush=True)
    assert n_params <= 12_000_000, n_params

    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-8, fused=True)

    def loss_of(x, y, smoothing):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1), ignore_index=-100,
                               label_smoothing=smoothing)

    def dev_loss():
        model.eval()
        tot, n = 0.0, 0
        with torch.no_grad():
            for x, y in batches(dev_ex, pad, False, rng):
                x, y = torch.tensor(x, device=device), torch.tensor(y, device=device)
                k = int((y != -100).sum())
                tot += float(loss_of(x, y, 0.0)) * k
                n += k
        model.train()
        return tot / n

    log, best, best_state = [], float("inf"), None
    step, epoch, warmup = 0, 0, 200
    t_train = time.time()
    last_eval = t_train
    smooth = None
    model.train()
    done = False
    while not done:
        epoch += 1
        for x, y in batches(train_ex, pad, True, rng):
            elapsed = time.time() - t_train
            if elapsed >= args.seconds:
                done = True
                break
            frac = min(1.0, elapsed / args.seconds)
            lr = args.lr * min(1.0, (step + 1) / warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
            for g in opt.param_groups:
                g["lr"] = lr
            x, y = torch.tensor(x, device=device), torch.tensor(y, device=device)
            loss = loss_of(x, y, 0.1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            if step % 50 == 0:
                v = float(loss)
                smooth = v if smooth is None else 0.9 * smooth + 0.1 * v
            if time.time() - last_eval > 20 or step == 100:
                last_eval = time.time()
                d = dev_loss()
                log.append((step, epoch, round(time.time() - t_train, 1), smooth, d, lr))
                print(f"step {step} epoch {epoch} t {log[-1][2]}s train {smooth or float('nan'):.3f} dev {d:.4f} lr {lr:.2e}", flush=True)
                if d < best:
                    best = d
                    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    d = dev_loss()
    log.append((step, epoch, round(time.time() - t_train, 1), smooth, d, 0.0))
    if d < best:
        best, best_state = d, None
    if best_state is not None:
        model.load_state_dict(best_state)
    print(f"trained {step} steps, {epoch} epochs; best dev loss {best:.4f}", flush=True)

    folder = os.path.join(args.out, "model")
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True, max_shard_size="14MB")
    hy.hub_layout(os.path.join(folder, "config.json"))
    hy.write_tiktoken(os.path.join(folder, "hy.tiktoken"), ranks)
    json.dump({"bos_token_id": specials["<|startoftext|>"], "eos_token_id": [eos, specials["<|endoftext|>"]],
               "pad_token_id": pad, "do_sample": False, "max_new_tokens": 256},
              open(os.path.join(folder, "generation_config.json"), "w"), indent=2)
    json.dump({"name": "hymt-demo", "prompt_style": "hunyuan-mt", "languages": ["en", "zh", "de"],
               "description": "hymt's demo model: a small HunYuanDenseV1 trained on Tatoeba sentence pairs "
                              "(tatoeba.org, CC BY 2.0 FR) by tools/train_demo.py",
               "parameters": n_params, "training_steps": step, "best_dev_loss": round(best, 4)},
              open(os.path.join(folder, "hymt.json"), "w"), indent=2)

    with open(os.path.join(args.out, "loss.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "epoch", "seconds", "train_loss_smoothed", "dev_loss", "lr"])
        w.writerows(log)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot([r[0] for r in log if r[3]], [r[3] for r in log if r[3]], label="train (label-smoothed)")
        ax.plot([r[0] for r in log], [r[4] for r in log], label="dev")
        ax.set_xlabel("step"); ax.set_ylabel("cross-entropy (nats/token)"); ax.legend(); ax.grid(alpha=0.3)
        ax.set_title("hymt demo model")
        fig.tight_layout(); fig.savefig(os.path.join(args.out, "loss.png"), dpi=100)
    except Exception as e:  # the CSV is the record; the picture is a convenience
        print(f"no plot: {e}", flush=True)

    # Quality of the model exactly as saved (bf16), greedy, with sacreBLEU.
    import sacrebleu

    ev = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, attn_implementation="sdpa").to(device).eval()
    stop_ids = {eos, specials["<|endoftext|>"]}
    result = {"params": n_params, "steps": step, "best_dev_loss": best, "directions": {}}
    for src, tgt in DIRECTIONS:
        rows = test[(src, tgt)][:500]
        hyps = greedy_translate(ev, enc, rows, src, tgt, stop_ids, device)
        refs = [r for _, r in rows]
        texts = [h for h, _ in hyps]
        chrf = sacrebleu.corpus_chrf(texts, [refs]).score
        bleu = sacrebleu.corpus_bleu(texts, [refs], tokenize="zh" if tgt == "zh" else "13a").score
        result["directions"][f"{src}-{tgt}"] = {"chrf": chrf, "bleu": bleu, "lines": len(rows),
                                                "hyp_ids": [ids for _, ids in hyps]}
        print(f"{src}->{tgt}: chrF {chrf:.2f} BLEU {bleu:.2f}; e.g. {rows[0][0]!r} -> {texts[0]!r}", flush=True)
    samples = [("en", "zh", "The house is big."), ("en", "de", "The house is big."),
               ("zh", "en", "我喜欢喝茶。"), ("de", "en", "Ich habe keine Zeit.")]
    result["samples"] = []
    for src, tgt, s in samples:
        h = greedy_translate(ev, enc, [(s, "")], src, tgt, stop_ids, device)[0]
        result["samples"].append({"src": src, "tgt": tgt, "text": s, "hyp": h[0], "ids": h[1]})
        print(f"sample {src}->{tgt}: {s!r} -> {h[0]!r}", flush=True)
    json.dump(result, open(os.path.join(args.out, "eval.json"), "w"), ensure_ascii=False)
    print(f"total {time.time() - t_start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
