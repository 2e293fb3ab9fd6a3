"""Chat-template references for tests/cli/chat_*.sh, written here (no download).

  chat_ref.py setup DIR      tokenizer directories DIR/<family>/ (one byte-level
                             BPE tokenizer.json with every family's special tokens,
                             each family's template in the shape its models use) and
                             the conversations DIR/conv.jsonl
  chat_ref.py render DIR FAMILY GEN OUT
                             transformers' apply_chat_template(tokenize=False) of
                             each conversation, each followed by a NUL byte
  chat_ref.py all DIR        every family's renderings (DIR/ref_<family>_<0|1>.bin)
                             and masks (DIR/masks_<family>.json), one process
  chat_ref.py compare REF SHARD...
                             the version-3 shards' documents against masks REF
  chat_ref.py masks DIR FAMILY OUT
                             ids and flags (1 target, 2 document start) per
                             conversation as JSON: the rule of docs/data.md with the
                             `tokenizers` offsets (a target lies wholly in a span)
"""
import json
import os
import sys

SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
            "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "[INST]", "[/INST]",
            "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<|system|>", "<|user|>",
            "<|assistant|>", "<|end|>"]

# Llama 3.1-3.3: header ids, eot, a system header always (no date: strftime_now
# is real time in transformers), the system message cut from the loop.
LLAMA3 = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if message.role not in ['user', 'assistant'] %}
        {{- raise_exception("Unknown role: " ~ message.role) }}
    {%- endif %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# Qwen 2.5: im_start/im_end, a default system message, tools as JSON lines.
QWEN25 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- for tool in tools %}
        {{- "\\n" }}{{- tool | tojson }}
    {%- endfor %}
    {{- '<|im_end|>\\n' }}
{%- elif messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- else %}
    {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- raise_exception('tool calls are not in this test') }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Qwen 3: a namespace finds the last user query walking messages[::-1]; the
# reasoning before it is stripped, after it kept in <think>.
QWEN3 = """{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system") %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- else %}
        {{- raise_exception('Unknown role: ' + message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

# Mistral: [INST], the system message folded into the first user turn, roles
# must alternate (raise_exception), eos after each answer.
MISTRAL = """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}
        {%- else %}
            {{- '[INST] ' + message['content'] + '[/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content']|trim + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""

# Gemma 2/3: start_of_turn, assistant is "model", the system message folded
# into the first user turn.
GEMMA = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- else -%}
        {{ raise_exception("Only text content in this test") }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
"""

# Phi-3/4: <|user|> ... <|end|>, written without '-' so that trim_blocks and
# lstrip_blocks decide the whitespace; eos when no generation prompt follows.
PHI3 = """{% for message in messages %}
  {% if message['role'] == 'system' %}
{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}
  {% elif message['role'] == 'user' %}
{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}
  {% elif message['role'] == 'assistant' %}
{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}
  {% endif %}
{% endfor %}
{% if add_generation_prompt %}
{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}
"""

FAMILIES = {
    "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>"),
    "qwen25": (QWEN25, None, "<|im_end|>"),
    "qwen3": (QWEN3, None, "<|im_end|>"),
    "mistral": (MISTRAL, "<s>", "</s>"),
    "gemma": (GEMMA, "<bos>", "<end_of_turn>"),
    "phi3": (PHI3, None, "<|end|>"),
    "mistral_sp": (MISTRAL, "<s>", "</s>"),  # with a SentencePiece-style tokenizer
}


def sentencepiece_style():
    """A Llama-2/Mistral-style tokenizer.json: Prepend and Replace to '▁',
    byte fallback, a few merges; [INST] and [/INST] special."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "[INST]": 3, "[/INST]": 4}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("a", "t"), ("c", "h"), ("ch", "at")]
    for t in ["▁"] + list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,!?'") + [a + b for a, b in merges]:
        vocab.setdefault(t, len(vocab))
    added = [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for t in ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
            "pre_tokenizer": None, "post_processor": None,
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                      "ignore_merges": False, "vocab": vocab, "merges": [list(m) for m in merges]}}

CONVS = [
    {"messages": [{"role": "system", "content": "  You are terse.  "},
                  {"role": "user", "content": "Grüße! What is 東京?"},
                  {"role": "assistant", "content": "The capital of Japan 🚀."}]},
    {"messages": [{"role": "user", "content": "one"},
                  {"role": "assistant", "content": "<think>\ncount\n</think>\n\nuno"},
                  {"role": "user", "content": "two\n"},
                  {"role": "assistant", "content": "<think>\nagain\n</think>\n\ndos"},
                  {"role": "user", "content": "three"},
                  {"role": "assistant", "content": " tres "}]},
    {"prompt": "Say «hi» in Greek.", "completion": "Γειά σου"},
    {"messages": [{"role": "system", "content": "Answer in French."},
                  {"role": "user", "content": "cat"},
                  {"role": "assistant", "content": "chat"},
                  {"role": "user", "content": "dog"},
                  {"role": "assistant", "content": "chien"}]},
]


def messages(rec):
    if "messages" in rec:
        return rec["messages"]
    return [{"role": "user", "content": rec["prompt"]}, {"role": "assistant", "content": rec["completion"]}]


def setup(d):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    corpus = [json.dumps(c, ensure_ascii=False) for c in CONVS] * 4
    corpus += [t for t in (LLAMA3, QWEN3, MISTRAL, GEMMA, PHI3)]
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens(["<think>", "</think>"])  # Qwen 3's: added, not special
    for fam, (tmpl, bos, eos) in FAMILIES.items():
        p = os.path.join(d, fam)
        os.makedirs(p, exist_ok=True)
        if fam.endswith("_sp"):
            json.dump(sentencepiece_style(), open(os.path.join(p, "tokenizer.json"), "w"), ensure_ascii=False)
        else:
            tok.save(os.path.join(p, "tokenizer.json"))
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos,
               "model_max_length": 4096}
        if bos:
            cfg["bos_token"] = {"__type": "AddedToken", "content": bos, "lstrip": False, "normalized": False,
                                "rstrip": False, "single_word": False, "special": True}
        if fam == "qwen3":  # newer saves: the template in a file of its own
            open(os.path.join(p, "chat_template.jinja"), "w").write(tmpl)
        else:
            cfg["chat_template"] = tmpl
        json.dump(cfg, open(os.path.join(p, "tokenizer_config.json"), "w"), ensure_ascii=False, indent=1)
    with open(os.path.join(d, "conv.jsonl"), "w") as f:
        for c in CONVS:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")


def load(d, fam):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(os.path.join(d, fam))


def convs(d):
    return [json.loads(l) for l in open(os.path.join(d, "conv.jsonl"), encoding="utf-8") if l.strip()]


def render(d, fam, gen, out):
    tok = load(d, fam)
    with open(out, "wb") as f:
        for rec in convs(d):
            text = tok.apply_chat_template(messages(rec), tokenize=False, add_generation_prompt=gen)
            f.write(text.encode("utf-8") + b"\0")


def masks(d, fam, out):
    tok = load(d, fam)
    res = []
    for rec in convs(d):
        msgs = messages(rec)
        text = tok.apply_chat_template(msgs, tokenize=False)
        spans = []
        for i, m in enumerate(msgs):
            if m["role"] != "assistant":
                continue
            a = tok.apply_chat_template(msgs[:i], tokenize=False, add_generation_prompt=True) if i else ""
            b = tok.apply_chat_template(msgs[:i + 1], tokenize=False).encode()
            full = text.encode()
            same = 0  # where b stops agreeing with the whole conversation
            while same < len(b) and same < len(full) and b[same] == full[same]:
                same += 1
            spans.append((len(a.encode()), same))
        enc = tok.backend_tokenizer.encode(text, add_special_tokens=False)
        byte_at = [0]
        for ch in text:
            byte_at.append(byte_at[-1] + len(ch.encode()))
        flags = []
        for k, (s, e) in enumerate(enc.offsets):
            s, e = byte_at[s], byte_at[e]
            f = 2 if k == 0 else 0
            if e > s and any(a <= s and e <= b for a, b in spans):
                f |= 1
            flags.append(f)
        res.append({"ids": enc.ids, "flags": flags})
    json.dump(res, open(out, "w"))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "setup":
        setup(sys.argv[2])
    elif cmd == "render":
        render(sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5])
    elif cmd == "masks":
        masks(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "all":
        d = sys.argv[2]
        for fam in FAMILIES:
            for g in (0, 1):
                render(d, fam, g == 1, os.path.join(d, "ref_%s_%d.bin" % (fam, g)))
            masks(d, fam, os.path.join(d, "masks_%s.json" % fam))


def shard_docs(path):
    """The documents of a version-3 shard: [{"ids": [...], "flags": [...]}]."""
    import struct
    raw = open(path, "rb").read()
    magic, version, n = struct.unpack("<3i", raw[:12])
    assert magic == 20240520 and version == 3 and len(raw) == 1024 + 5 * n, (path, version, n, len(raw))
    ids = list(struct.unpack("<%dI" % n, raw[1024:1024 + 4 * n]))
    flags = list(raw[1024 + 4 * n:])
    docs = []
    for i, (t, f) in enumerate(zip(ids, flags)):
        if f & 2:
            docs.append({"ids": [], "flags": []})
        docs[-1]["ids"].append(t)
        docs[-1]["flags"].append(f)
    return docs


def compare(ref, shards):
    """Exit 1 unless the shards' documents are ref's (ids and flags)."""
    want = json.load(open(ref))
    got = [d for s in shards for d in shard_docs(s)]
    bad = 0
    for k, (w, g) in enumerate(zip(want, got)):
        if w != g:
            bad += 1
            print("conversation %d differs:\n want %s\n got  %s" % (k, w, g))
    if len(want) != len(got):
        bad += 1
        print("%d conversations, %d documents" % (len(want), len(got)))
    targets = sum(sum(f & 1 for f in d["flags"]) for d in want)
    print("%d conversations, %d tokens, %d targets: %s" % (len(want), sum(len(d["ids"]) for d in want),
                                                         targets, "same" if not bad else "DIFFERENT"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__" and sys.argv[1] == "compare":
    compare(sys.argv[2], sys.argv[3:])
