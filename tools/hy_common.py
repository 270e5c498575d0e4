"""Facts shared by the Python tools (fixtures, tokenizer goldens, demo training).

These scripts run on the GPU host with torch, transformers, tiktoken and tokenizers. The C++ engine
has its own implementation of everything here; these are the reference side.
"""

import base64
import json

# The Hunyuan 7B-family split regex (docs: ../shared/docs/MODEL.md). Note the single-digit \p{N}.
HUNYUAN_PAT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# The hy_ (1.8B) family's three-pass rule, as llama.cpp's `hunyuan-dense` pre-tokenizer applies it.
HY_DENSE_PATS = [
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]

# Special tokens follow the ranks in this order: <|endoftext|> = n_ranks, <|startoftext|> = n_ranks + 1, ...
SPECIAL_NAMES = ["<|endoftext|>", "<|startoftext|>", "<|bos|>", "<|eos|>", "<|pad|>"] + [
    f"<|extra_{i}|>" for i in range(205)
]

BOS = "<|startoftext|>"
USER_END = "<|extra_0|>"  # ends the user turn; the answer follows
SYSTEM_END = "<|extra_4|>"
EOS = "<|eos|>"

LANG_NAMES = {  # code: (English, Chinese)
    "zh": ("Chinese", "中文"),
    "en": ("English", "英语"),
    "de": ("German", "德语"),
}


def load_tiktoken(path, limit=None):
    """Returns {token bytes: rank} from a hy.tiktoken file (base64 token, space, rank per line)."""
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            tok, rank = line.split()
            rank = int(rank)
            if limit is None or rank < limit:
                ranks[base64.b64decode(tok)] = rank
    return ranks


def write_tiktoken(path, ranks):
    with open(path, "wb") as f:
        for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(base64.b64encode(tok) + b" " + str(rank).encode() + b"\n")


def special_tokens(n_ranks):
    return {name: n_ranks + i for i, name in enumerate(SPECIAL_NAMES)}


def make_encoding(ranks, name="hy"):
    import tiktoken

    return tiktoken.Encoding(
        name=name,
        pat_str=HUNYUAN_PAT,
        mergeable_ranks=ranks,
        special_tokens=special_tokens(len(ranks)),
    )


def fnv1a64_ids(ids):
    """FNV-1a 64 over the ids as little-endian uint32: the hash the C++ tests recompute."""
    h = 0xCBF29CE484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little"):
            h ^= b
            h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def user_prompt(src, tgt, text):
    """Hunyuan-MT-7B prompt: Chinese template when Chinese is on either side, else English."""
    if "zh" in (src, tgt):
        return f"把下面的文本翻译成{LANG_NAMES[tgt][1]}，不要额外解释。\n\n{text}"
    return f"Translate the following segment into {LANG_NAMES[tgt][0]}, without additional explanation.\n\n{text}"


def chat(user, system=None):
    if system:
        return f"{BOS}{system}{SYSTEM_END}{user}{USER_END}"
    return f"{BOS}{user}{USER_END}"


def bytes_to_unicode():
    """GPT-2's byte <-> printable-character map used by byte-level tokenizer.json files."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def merges_from_ranks(ranks):
    """Derives BPE merges from tiktoken ranks. tiktoken merges any adjacent pair whose concatenation is a
    token, lowest resulting rank first; listing every such split, ordered by the rank of its result,
    makes a merge-list BPE behave the same."""
    merges = []
    for tok, rank in ranks.items():
        for i in range(1, len(tok)):
            left, right = tok[:i], tok[i:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], left, right))
    merges.sort()
    return [(m[3], m[4]) for m in merges]


def write_tokenizer_json(path, ranks):
    """Writes a Hugging Face tokenizer.json equivalent to tiktoken over `ranks` with the Hunyuan rule."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    bu = bytes_to_unicode()
    enc = lambda b: "".join(bu[x] for x in b)
    vocab = {enc(tok): rank for tok, rank in ranks.items()}
    merges = [(enc(a), enc(b)) for a, b in merges_from_ranks(ranks)]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(HUNYUAN_PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(n, special=True, normalized=False) for n in SPECIAL_NAMES])
    for name, want in special_tokens(len(ranks)).items():
        got = tk.token_to_id(name)
        if got != want:
            raise ValueError(f"tokenizer.json gave {name} id {got}, expected {want}")
    tk.save(path)
    return tk


def hub_layout(path):
    """Rewrites a saved config.json the way the published Hunyuan-MT-7B config spells RoPE (rope_theta and
    a legacy rope_scaling holding alpha), so the engine's loader sees the spelling users have."""
    with open(path) as f:
        cfg = json.load(f)
    params = cfg.pop("rope_parameters", None) or {}
    cfg["rope_theta"] = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    cfg["rope_scaling"] = {
        "alpha": 1000.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0,
        "mscale": 1.0, "mscale_all_dim": 1.0, "type": "dynamic",
    }
    cfg["architectures"] = ["HunYuanDenseV1ForCausalLM"]
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
